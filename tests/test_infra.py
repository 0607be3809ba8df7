"""infra/: every file parses, the launchers set the rendezvous variables the training entry point
expects, and every entry point and environment variable the files name exists in the code.

No Docker engine or cluster is needed: YAML is parsed, shell scripts run with stand-ins for
srun, scontrol and python, and names are checked against the code and the installed libraries.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
INFRA = REPO / "infra"
COMPOSE = INFRA / "docker-compose.yaml"
PYTORCHJOB = INFRA / "k8s" / "pytorchjob.yaml"
SBATCH = INFRA / "slurm" / "train.sbatch"
PROJECT_PACKAGES = ("foundry", "flows", "tasks", "models")
TRAIN_ENTRY = "tasks.train_worker"

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


def infra_files() -> list[Path]:
    return sorted(p for p in INFRA.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def infra_text() -> dict[Path, str]:
    return {p: p.read_text() for p in infra_files()}


def yaml_docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def k8s_docs() -> list[dict]:
    return [d for p in sorted((INFRA / "k8s").glob("*.yaml")) for d in yaml_docs(p)]


def pytorchjob() -> dict:
    (job,) = [d for d in yaml_docs(PYTORCHJOB) if d.get("kind") == "PyTorchJob"]
    return job


def project_code() -> str:
    """Foundry's Python sources, and prefect.yaml, whose pull step reads the environment at run time."""
    files = [p for pkg in PROJECT_PACKAGES for p in (REPO / pkg).rglob("*.py")] + list(REPO.glob("prefect.yaml"))
    return "\n".join(p.read_text() for p in files)


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def pinned(package: str) -> str:
    (spec,) = [d for d in pyproject()["project"]["dependencies"] if re.match(rf"{package}==", d)]
    return spec.split("==")[1]


def python_snippets(text: str) -> list[str]:
    """The bodies of multi-line `python -c '...'` programs in a shell script."""
    return re.findall(r"-c '\n(.*?)\n' ", text, flags=re.S)


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
    from foundry.env import TELEMETRY_OFF

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
    # Telemetry off in everything that runs Prefect, MLflow or Foundry, with foundry/env.py's values.
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

def _container_commands(spec: dict) -> list:
    pod = spec["template"]["spec"]
    containers = pod.get("initContainers", []) + pod["containers"]
    return [(c["name"], c["image"], c.get("command"), c.get("args")) for c in containers]


def test_pytorchjob_master_and_worker_run_the_same_training_command():
    job = pytorchjob()
    assert job["apiVersion"] == "kubeflow.org/v1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"} and replicas["Master"]["replicas"] == 1
    assert job["spec"]["nprocPerNode"] == "1"
    master, worker = (_container_commands(replicas[role]) for role in ("Master", "Worker"))
    assert master == worker
    (training,) = [c for c in replicas["Master"]["template"]["spec"]["containers"] if c["name"] == "pytorch"]
    script = " ".join(training["command"] + training.get("args", []))
    assert f"python -m {TRAIN_ENTRY}" in script
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


# --- the launch scripts, run with stand-ins -----------------------------------------------------

FAKE_PYTHON = """#!{python} -S
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
if sys.argv[1:2] == ["-c"]:
    print("{{}}")
"""
FAKE_SRUN = """#!/bin/bash
while [[ $1 == -* ]]; do shift; done
for ((i = 0; i < SLURM_JOB_NUM_NODES; i++)); do
    SLURM_PROCID=$i SLURM_NODEID=$i SLURM_LOCALID=0 SLURM_NTASKS=$SLURM_JOB_NUM_NODES "$@" || exit $?
done
"""
FAKE_SCONTROL = """#!/bin/bash
[[ "$1 $2" == "show hostnames" ]] && printf '%s\\n' gpu01 gpu02 gpu03
"""


@pytest.fixture()
def stand_ins(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"python": FAKE_PYTHON.format(python=sys.executable), "srun": FAKE_SRUN, "scontrol": FAKE_SCONTROL}
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log), "HOME": str(tmp_path),
           "MLFLOW_TRACKING_URI": "http://mlflow:5000", "MLFLOW_RUN_ID": "inherited"}

    def calls() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()]

    return env, calls


def _training_calls(calls: list[dict]) -> list[dict]:
    return [c for c in calls if c["argv"][:2] == ["-m", TRAIN_ENTRY]]


def test_pytorchjob_maps_the_operator_rank_to_node_rank(stand_ins, tmp_path):
    env, calls = stand_ins
    (training,) = pytorchjob()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    home = tmp_path / "home"
    home.mkdir()
    operator = {"MASTER_ADDR": "foundry-train-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2"}
    config_map = {"DATA_VERSION": "abc123", "RUN_ID": "run42", "CHECKPOINT_DIR": "/checkpoints/x", "FOUNDRY_HOME": str(home)}
    subprocess.run(training["command"] + training.get("args", []), env={**env, **operator, **config_map}, check=True)
    (render,) = [c for c in calls() if c["argv"][0] == "-c"]
    assert render["argv"][-2:] == ["train.num_nodes=3", "train.devices=1"]
    (call,) = _training_calls(calls())
    assert call["argv"][2:] == [
        "--config", f"{home}/train_config.json", "--data", f"{home}/hydrated/abc123",
        "--checkpoints", "/checkpoints/x", "--data-version", "abc123", "--run-id", "run42"]
    assert {k: call["env"][k] for k in ("NODE_RANK", "LOCAL_RANK", "RANK", "WORLD_SIZE")} == {
        "NODE_RANK": "2", "LOCAL_RANK": "0", "RANK": "2", "WORLD_SIZE": "3"}
    assert "MLFLOW_RUN_ID" not in call["env"]


def test_sbatch_runs_one_task_per_node_after_each_node_hydrates(stand_ins, tmp_path):
    env, calls = stand_ins
    submit = tmp_path / "submit"
    submit.mkdir()
    slurm = {"SLURM_SUBMIT_DIR": str(submit), "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[01-03]",
             "SLURM_JOB_NUM_NODES": "3", "NODE_LOCAL_DIR": str(tmp_path / "local")}
    subprocess.run(["bash", str(SBATCH), "params.yaml", "abc123", "s3://bucket/remote", "run42"],
                   env={**env, **slurm}, check=True, capture_output=True)
    made = calls()
    (render,) = [c for c in made if c["argv"][0] == "-c" and "load_config" in c["argv"][1]]
    assert render["argv"][2:] == ["params.yaml", "train.num_nodes=3", "train.devices=1"]
    hydrations = [c for c in made if c["argv"][0] == "-c" and "hydrate" in c["argv"][1]]
    assert [c["argv"][2:] for c in hydrations] == [["abc123", "s3://bucket/remote"]] * 3
    training = _training_calls(made)
    assert made.index(training[0]) > made.index(hydrations[-1])
    home, run_dir = tmp_path / "local" / "foundry-77", submit / "runs" / "slurm-77"
    for rank, call in enumerate(training):
        assert call["argv"][2:] == [
            "--config", f"{run_dir}/train_config.json", "--data", f"{home}/hydrated/abc123",
            "--checkpoints", f"{run_dir}/checkpoints", "--data-version", "abc123", "--run-id", "run42"]
        rendezvous = {k: call["env"][k] for k in ("MASTER_ADDR", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK")}
        assert rendezvous == {
            "MASTER_ADDR": "gpu01", "WORLD_SIZE": "3", "NODE_RANK": str(rank), "RANK": str(rank), "LOCAL_RANK": "0"}
        assert call["env"]["FOUNDRY_HOME"] == str(home) and "MLFLOW_RUN_ID" not in call["env"]
    assert len(training) == 3 and len({c["env"]["MASTER_PORT"] for c in training}) == 1


def _all_snippets() -> list[str]:
    replicas = pytorchjob()["spec"]["pytorchReplicaSpecs"].values()
    scripts = [SBATCH.read_text()] + [" ".join(c[2] or []) for spec in replicas for c in _container_commands(spec)]
    return [s for script in scripts for s in python_snippets(script)]


def test_config_snippets_render_a_valid_config_sized_to_the_job(monkeypatch, capsys):
    from foundry.config import validate

    snippets = [s for s in _all_snippets() if "load_config" in s]
    assert len(snippets) == 3  # sbatch, Master, Worker
    for code in snippets:
        argv = ["-c", str(REPO / "configs" / "tiny.yaml"), "train.num_nodes=4", "train.devices=1"]
        monkeypatch.setattr(sys, "argv", argv)
        exec(compile(code, "<python -c>", "exec"), {"__name__": "__main__"})
        config = validate(json.loads(capsys.readouterr().out))
        assert (config.train.num_nodes, config.train.devices) == (4, 1)


def test_hydrate_snippets_call_hydrate_with_a_version_record(monkeypatch, capsys):
    import tasks.versioning
    from foundry.env import foundry_home

    seen = []
    monkeypatch.setattr(tasks.versioning, "hydrate", lambda version, home: seen.append((version, home)) or home / "x")
    snippets = [s for s in _all_snippets() if "hydrate(" in s]
    assert len(snippets) == 3
    for code in snippets:
        monkeypatch.setattr(sys, "argv", ["-c", "abc123", "s3://bucket/remote"])
        exec(compile(code, "<python -c>", "exec"), {"__name__": "__main__"})
    out = {"path": "prepared", "hash": "md5", "md5": "abc123.dir"}
    record = {"data_version": "abc123", "remote": "s3://bucket/remote", "out": out}
    assert seen == [(record, foundry_home())] * 3
    capsys.readouterr()


# --- names the infra files use exist in the code ---------------------------------------------------

def test_python_modules_named_with_dash_m_are_importable():
    import importlib.util

    pattern = r"(?:python3?|PYTHON\"?|PYTHON})\s+-m\s+([\w.]+)"
    modules = {m for text in infra_text().values() for m in re.findall(pattern, text)}
    assert TRAIN_ENTRY in modules
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert not missing, f"infra/ runs modules that do not exist: {missing}"


def test_training_entry_point_accepts_every_flag_the_launchers_pass(capsys):
    from tasks.train_worker import main

    with pytest.raises(SystemExit):
        main(["--help"])
    accepted = set(re.findall(r"--[\w-]+", capsys.readouterr().out))
    passed = {f for text in infra_text().values()
              for call in re.findall(rf"-m {re.escape(TRAIN_ENTRY)}((?:\\\n|[^\n])*)", text)
              for f in re.findall(r"(?<![\w-])--[\w-]+", call)}
    assert {"--config", "--data", "--checkpoints", "--run-id"} <= passed
    assert passed <= accepted, f"{TRAIN_ENTRY} does not accept {sorted(passed - accepted)}"


def test_foundry_commands_named_in_infra_parse(capsys):
    from foundry.cli import build_parser

    assert "foundry" in pyproject()["project"]["scripts"]
    # `foundry` where a command starts: a line (of a script, comment or code block), `...`, after ; | & ( or exec.
    at_command = r"(?:^[ \t#>-]*|[`(;|&][ \t]*|\bexec[ \t]+)(?:\.venv/bin/)?foundry[ \t]+([a-z][^`\n;|&)#]*)"
    invocations = [(path.name, m.group(1)) for path, text in infra_text().items()
                   for m in re.finditer(at_command, text, flags=re.M)]
    assert invocations, "expected infra/ to document at least one foundry command"
    for where, command in invocations:
        argv = [a for a in shlex.split(command) if a != "\\"]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 0, f"{where}: `foundry {command.strip()}` is not a valid foundry command"
    capsys.readouterr()


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
    containers = [c for doc in k8s_docs() for c in _k8s_containers(doc) if c["image"].split(":")[0] == image.split(":")[0]]
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
    unknown = sorted((where, name) for where, name in names
                     if name not in LIBRARY_SETTINGS and not re.search(rf"\b{name}\b", code))
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
