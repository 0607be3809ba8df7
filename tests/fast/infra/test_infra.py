"""infra/: every file parses, and every entry point, image, version and environment variable the
files name exists in the code or the installed libraries. No Docker engine or cluster is needed.
The launch scripts themselves run with stand-ins in test_infra_launchers.py.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from infra_files import (
    COMPOSE,
    INFRA,
    PYTORCHJOB,
    SBATCH,
    TRAIN_ENTRY,
    container_commands,
    infra_files,
    infra_text,
    k8s_docs,
    pinned,
    project_code,
    pyproject,
    pytorchjob,
    yaml_docs,
)

TORCHRUN = "torch.distributed.run"  # what the torchrun command runs; through the job's own interpreter here

# Variables the infra files set that the project does not read itself: each is a setting of the
# library named (the one-word reason), and test_library_settings_are_real checks that it is one.
LIBRARY_SETTINGS = {
    "PREFECT_API_URL": "prefect",
    "PREFECT_SERVER_DATABASE_CONNECTION_URL": "prefect",
    "PREFECT_SERVER_UI_API_URL": "prefect",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "prefect",
    "MLFLOW_TRACKING_URI": "mlflow",
    "MLFLOW_S3_ENDPOINT_URL": "mlflow",
    "MLFLOW_DISABLE_TELEMETRY": "mlflow",
    "AWS_ACCESS_KEY_ID": "botocore",
    "AWS_SECRET_ACCESS_KEY": "botocore",
    "AWS_DEFAULT_REGION": "botocore",
}
CHECKED_PREFIXES = ("FOUNDRY", "PREFECT", "MLFLOW", "DVC", "AWS")
TELEMETRY_KEYS = ("DO_NOT_TRACK", "MLFLOW_DISABLE_TELEMETRY", "PREFECT_SERVER_ANALYTICS_ENABLED", "DVC_NO_ANALYTICS")


# --- parsing --------------------------------------------------------------------------------------


def test_every_yaml_file_parses_and_k8s_documents_are_objects():
    files = [p for p in infra_files() if p.suffix in (".yaml", ".yml")]
    assert COMPOSE in files and PYTORCHJOB in files
    for path in files:
        docs = yaml_docs(path)
        assert docs and all(isinstance(d, dict) for d in docs), path
    for doc in k8s_docs():
        assert {"apiVersion", "kind", "metadata"} <= doc.keys() and doc["metadata"].get("name"), doc


def test_sbatch_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)


# --- docker-compose -------------------------------------------------------------------------------


def test_compose_runs_the_servers_and_a_worker_wired_to_them():
    from foundry.runtime.env import TELEMETRY_OFF

    services = yaml_docs(COMPOSE)[0]["services"]
    assert {"postgres", "minio", "minio-init", "prefect-server", "mlflow", "worker"} <= services.keys()
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            context = INFRA / service["build"]["context"]
            assert (context / service["build"].get("dockerfile", "Dockerfile")).is_file(), name
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (INFRA / source).exists(), f"{name} mounts missing {source}"

    def host(url: str) -> str:
        return re.match(r"[\w+]+://(?:[^@/]*@)?([\w.-]+)", url).group(1)

    worker = services["worker"]
    env = worker["environment"]
    assert host(env["PREFECT_API_URL"]) == "prefect-server"
    assert host(env["MLFLOW_TRACKING_URI"]) == "mlflow"
    assert host(env["AWS_ENDPOINT_URL_S3"]) == host(env["MLFLOW_S3_ENDPOINT_URL"]) == "minio"
    assert env["FOUNDRY_HOME"] in [v.split(":")[1] for v in worker["volumes"]]
    assert worker["build"]["dockerfile"] == "infra/Dockerfile"
    # Servers on PostgreSQL, MLflow artifacts in a bucket that the init container creates.
    prefect_db = services["prefect-server"]["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    assert prefect_db.startswith("postgresql+asyncpg://") and host(prefect_db) == "postgres"
    mlflow_args = services["mlflow"]["command"]
    store = mlflow_args[mlflow_args.index("--backend-store-uri") + 1]
    assert store.startswith("postgresql") and host(store) == "postgres"
    bucket = host(mlflow_args[mlflow_args.index("--artifacts-destination") + 1])
    assert f"minio/{bucket}" in services["minio-init"]["command"][0]
    # Telemetry off in everything that runs Prefect, MLflow or Foundry, with foundry/runtime/env.py's values.
    for name in ("prefect-server", "mlflow", "worker"):
        for key in TELEMETRY_KEYS:
            assert services[name]["environment"].get(key) == TELEMETRY_OFF[key], (name, key)


def test_images_pin_the_versions_pyproject_pins():
    dockerfile = (INFRA / "Dockerfile").read_text()
    assert re.findall(r"pip install torch==([\w.]+)", dockerfile) == [pinned("torch")]
    assert re.search(r"^RUN pip install \.$", dockerfile, flags=re.M)
    mlflow_dockerfile = (INFRA / "mlflow.Dockerfile").read_text()
    assert re.search(r"ARG SERVER_VERSION=([\w.]+)", mlflow_dockerfile).group(1) == pinned("mlflow")
    assert re.search(r"boto3==([\w.]+)", mlflow_dockerfile).group(1) == pinned("boto3")
    image = yaml_docs(COMPOSE)[0]["services"]["prefect-server"]["image"]
    assert image == f"prefecthq/prefect:{pinned('prefect')}-python3.11"


# --- Kubernetes -----------------------------------------------------------------------------------


def test_pytorchjob_master_and_worker_run_the_same_training_command():
    job = pytorchjob()
    assert job["apiVersion"] == "kubeflow.org/v1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"} and replicas["Master"]["replicas"] == 1
    assert job["spec"]["nprocPerNode"] == "1"
    master, worker = (container_commands(replicas[role]) for role in ("Master", "Worker"))
    assert master == worker
    (training,) = [c for c in replicas["Master"]["template"]["spec"]["containers"] if c["name"] == "pytorch"]
    script = " ".join(training["command"] + training.get("args", []))
    assert re.search(rf"exec python -m {TORCHRUN} (?:[^\n]|\\\n)* -m {re.escape(TRAIN_ENTRY)} ", script)
    for flag in ("--config", "--data", "--checkpoints", "--run-id"):
        assert flag in script, flag
    assert {"name": "pytorchjob-port", "containerPort": 23456} in training["ports"]


def test_k8s_references_resolve_to_defined_objects():
    docs = k8s_docs()
    defined = {(d["kind"], d["metadata"]["name"]) for d in docs}
    text = yaml.safe_dump_all(docs)
    referenced = (
        {("ConfigMap", n) for n in re.findall(r"configMapRef:\n\s+name: ([\w-]+)", text)}
        | {("ConfigMap", n) for n in re.findall(r"configMap:\n\s+name: ([\w-]+)", text)}
        | {("Secret", n) for n in re.findall(r"secretRef:\n\s+name: ([\w-]+)", text)}
        | {("PersistentVolumeClaim", n) for n in re.findall(r"claimName: ([\w-]+)", text)}
        | {("ServiceAccount", n) for n in re.findall(r"serviceAccountName: ([\w-]+)", text)}
    )
    assert referenced and referenced <= defined, referenced - defined
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --- names the infra files use exist in the code ---------------------------------------------------


def test_python_modules_named_with_dash_m_are_importable():
    import importlib.util

    # After python, or after torchrun's own flags: every `-m MODULE` anywhere in infra/.
    modules = {m for text in infra_text().values() for m in re.findall(r"(?<![\w-])-m\s+([A-Za-z_][\w.]*)", text)}
    assert {TRAIN_ENTRY, TORCHRUN, "foundry.cli"} <= modules
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert not missing, f"infra/ runs modules that do not exist: {missing}"


def _flags_after(module: str, until: str = "\n") -> set[str]:
    """Every --flag written after `-m module` in infra/, over continued lines, up to the end or `until`."""
    call = rf"-m {re.escape(module)}((?:\\\n|[^\n])*?)(?:{until}|$)"
    return {
        flag
        for text in infra_text().values()
        for args in re.findall(call, text, flags=re.M)
        for flag in re.findall(r"(?<![\w-])--[\w-]+", args)
    }


def test_training_entry_point_accepts_every_flag_the_launchers_pass():
    from foundry.training.worker import build_parser

    accepted = {option for action in build_parser()._actions for option in action.option_strings}
    passed = _flags_after(TRAIN_ENTRY)
    assert {"--config", "--data", "--checkpoints", "--run-id"} <= passed
    assert passed <= accepted, f"{TRAIN_ENTRY} does not accept {sorted(passed - accepted)}"


def test_torchrun_accepts_every_flag_the_launchers_pass():
    from torch.distributed.run import get_args_parser

    accepted = {option for action in get_args_parser()._actions for option in action.option_strings}
    passed = _flags_after(TORCHRUN, until=rf" -m {re.escape(TRAIN_ENTRY)}")
    assert {"--nnodes", "--nproc-per-node", "--rdzv-backend", "--node-rank", "--master-addr"} <= passed
    assert passed <= accepted, f"torchrun does not accept {sorted(passed - accepted)}"


def test_foundry_commands_named_in_infra_parse(capsys):
    from foundry.cli import build_parser

    assert "foundry" in pyproject()["project"]["scripts"]
    # `foundry` where a command starts: a line (of a script, comment or code block), `...`, after ; | & ( or exec.
    at_command = r"(?:^[ \t#>-]*|[`(;|&][ \t]*|\bexec[ \t]+)(?:\.venv/bin/)?foundry[ \t]+([a-z][^`\n;|&)#]*)"
    invocations = [
        (path.name, m.group(1))
        for path, text in infra_text().items()
        for m in re.finditer(at_command, text, flags=re.M)
    ]
    assert invocations, "expected infra/ to document at least one foundry command"
    for where, command in invocations:
        argv = [a for a in shlex.split(command) if a != "\\"]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 0, f"{where}: `foundry {command.strip()}` is not a valid foundry command"
    capsys.readouterr()


def test_foundry_serve_help_names_every_deployment_it_serves():
    from flows.deployments import DEPLOYMENTS
    from foundry.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in commands._choices_actions}
    assert all(re.search(rf"\b{d.name}\b", helps["serve"]) for d in DEPLOYMENTS), helps["serve"]


def _k8s_containers(doc: dict) -> list[dict]:
    """Every container and init container anywhere in a Kubernetes object."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                if isinstance(node.get(key), list):
                    found.extend(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return found


def _foundry_image_commands() -> list[list[str]]:
    """Exec-form commands of every container that runs the Foundry image (infra/Dockerfile)."""
    services = yaml_docs(COMPOSE)[0]["services"]
    image = services["worker"]["image"]
    commands = [s["command"] for s in services.values() if s.get("image") == image]
    containers = [
        c for doc in k8s_docs() for c in _k8s_containers(doc) if c["image"].split(":")[0] == image.split(":")[0]
    ]
    assert all(c["image"] == image for c in containers), "k8s and docker-compose run different Foundry images"
    commands += [c["command"] for c in containers]
    cmd = re.search(r"^CMD (\[.*\])$", (INFRA / "Dockerfile").read_text(), flags=re.M)
    return commands + [json.loads(cmd.group(1))]


def test_foundry_image_commands_are_installed_console_scripts():
    scripts = set(pyproject()["project"]["scripts"])
    venv_bin = Path(sys.executable).parent
    commands = _foundry_image_commands()
    assert len(commands) >= 4
    for command in commands:
        program = command[0]
        if program in ("sh", "bash", "python"):
            continue
        # The project's own scripts come from pyproject.toml, the rest from its pinned dependencies.
        assert program in scripts or (venv_bin / program).is_file(), f"{program} is not installed in the Foundry image"


def test_environment_variables_are_read_by_the_code_or_are_library_settings():
    code = project_code()
    names = {
        (path.relative_to(INFRA).as_posix(), name)
        for path, text in infra_text().items()
        for name in re.findall(rf"\b(?:{'|'.join(CHECKED_PREFIXES)})_[A-Z0-9_]*[A-Z0-9]\b", text)
    }
    assert {n for _, n in names} >= {"FOUNDRY_HOME", "PREFECT_API_URL", "MLFLOW_TRACKING_URI", "AWS_ENDPOINT_URL_S3"}
    unknown = sorted(
        (where, name) for where, name in names if name not in LIBRARY_SETTINGS and not re.search(rf"\b{name}\b", code)
    )
    assert not unknown, f"variables neither read by Foundry nor in LIBRARY_SETTINGS: {unknown}"
    stale = set(LIBRARY_SETTINGS) - {n for _, n in names}
    assert not stale, f"LIBRARY_SETTINGS entries no infra file uses: {sorted(stale)}"


def test_library_settings_are_real():
    import importlib.util

    from prefect.settings import Settings
    from prefect.settings.base import PrefectBaseSettings
    from pydantic import AliasChoices

    def prefect_names(model) -> set[str]:
        prefix = (model.model_config.get("env_prefix") or "").upper()
        names = set()
        for field_name, field in model.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, PrefectBaseSettings):
                names |= prefect_names(field.annotation)
                continue
            names.add(prefix + field_name.upper())
            alias = field.validation_alias
            aliases = alias.choices if isinstance(alias, AliasChoices) else [alias]
            names |= {a.upper() for a in aliases if isinstance(a, str)}
        return names

    def source_text(package: str) -> str:
        root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        return "\n".join(p.read_text() for p in root.glob("*.py"))

    known = {"prefect": prefect_names(Settings), "mlflow": source_text("mlflow"), "botocore": source_text("botocore")}

    def defines(lib: str, name: str) -> bool:
        if lib == "prefect":
            return name in known[lib]
        return f"'{name}'" in known[lib] or f'"{name}"' in known[lib]  # a string literal in its sources

    wrong = [(name, lib) for name, lib in LIBRARY_SETTINGS.items() if not defines(lib, name)]
    assert not wrong, f"not settings of the library named: {wrong}"
