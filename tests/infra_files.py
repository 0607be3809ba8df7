"""The infra/ files and the names test_infra*.py read from them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
INFRA = REPO / "infra"
COMPOSE = INFRA / "docker-compose.yaml"
PYTORCHJOB = INFRA / "k8s" / "pytorchjob.yaml"
SBATCH = INFRA / "slurm" / "train.sbatch"
PROJECT_PACKAGES = ("foundry", "flows", "tasks", "models")
TRAIN_ENTRY = "foundry.training.worker"


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


def container_commands(spec: dict) -> list:
    pod = spec["template"]["spec"]
    containers = pod.get("initContainers", []) + pod["containers"]
    return [(c["name"], c["image"], c.get("command"), c.get("args")) for c in containers]
