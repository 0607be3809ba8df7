"""Air-gapped operation: the tiny pipeline in a network namespace that has only loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _namespaces_allowed() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (iproute2) is not installed"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"new network namespaces are not permitted here: {probe.stderr.strip()}"
    return None


@pytest.mark.skipif(_namespaces_allowed() is not None, reason=str(_namespaces_allowed()))
def test_tiny_pipeline_passes_with_loopback_only(tmp_path):
    command = (
        f"ip link set lo up && exec {sys.executable} -m foundry.cli run --config configs/tiny.yaml "
        "--set registry.model_name=airgap-gpt"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env["FOUNDRY_HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        ["unshare", "-n", "sh", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Foundry pipeline finished" in result.stdout
    assert "models:/airgap-gpt/1" in result.stdout
