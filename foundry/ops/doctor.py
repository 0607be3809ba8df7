"""What `foundry doctor` checks: package versions, whether the backends answer, and every telemetry switch."""

from __future__ import annotations

import os
from pathlib import Path

from foundry.core.redact import redact_url
from foundry.ops.servers import answers
from foundry.runtime.env import foundry_home, package_versions


def doctor() -> list[tuple[str, bool, str]]:
    """(check, ok, detail) rows: versions, backends and whether they answer, telemetry switches."""
    rows = [(f"package {name}", version != "absent", version) for name, version in package_versions().items()]
    home = foundry_home()
    rows.append(("FOUNDRY_HOME", True, str(home)))
    prefect_api = os.environ.get("PREFECT_API_URL")
    if prefect_api:
        rows.append(("Prefect API", answers(prefect_api.rstrip("/") + "/health"), redact_url(prefect_api)))
    else:
        rows.append(
            ("Prefect API", True, f"embedded: temporary server per run, database in {os.environ['PREFECT_HOME']}")
        )
    tracking = os.environ["MLFLOW_TRACKING_URI"]
    if tracking.startswith("http"):
        rows.append(("MLflow tracking", answers(tracking.rstrip("/") + "/health"), redact_url(tracking)))
    else:
        rows.append(
            ("MLflow tracking", Path(tracking.removeprefix("sqlite:///")).parent.is_dir(), redact_url(tracking))
        )
    return rows + telemetry_rows(home)


def telemetry_rows(home: Path) -> list[tuple[str, bool, str]]:
    """Whether each library would send usage data, as the library itself decides it (its own function or
    settings object, which also read its config files and profiles), not the variables Foundry sets."""
    import importlib.util

    from mlflow.telemetry.utils import is_telemetry_disabled
    from prefect.analytics import is_telemetry_enabled
    from prefect.settings import get_current_settings

    server_analytics = get_current_settings().server.analytics_enabled
    rows = [
        _off("telemetry MLflow", is_telemetry_disabled(), "mlflow.telemetry.utils.is_telemetry_disabled()"),
        _off("telemetry Prefect client", not is_telemetry_enabled(), "prefect.analytics.is_telemetry_enabled()"),
        _off(
            "telemetry Prefect server", not server_analytics, f"settings: server.analytics_enabled={server_analytics}"
        ),
        _off(
            "telemetry Great Expectations",
            importlib.util.find_spec("great_expectations.analytics") is None,
            "this version has no analytics module",
        ),
    ]
    return rows + dvc_rows(home / "workspace")


def _off(check: str, off: bool, source: str) -> tuple[str, bool, str]:
    return check, off, f"{'off' if off else 'ON'}: {source}"


def dvc_rows(workspace: Path) -> list[tuple[str, bool, str]]:
    """DVC's analytics as DVC decides them in the workspace (the variable, then `core.analytics` from its
    system, global, repo and local config), and the config alone: what a plain `dvc` command run there,
    without Foundry's environment, would do."""
    import tempfile
    from contextlib import chdir

    from dvc.analytics import is_enabled
    from dvc.config import Config, to_bool

    repo = workspace / ".dvc"
    where = f"config of {workspace}" if repo.is_dir() else "global and system config"
    configured = Config(dvc_dir=str(repo) if repo.is_dir() else None, validate=False)
    analytics = configured.get("core", {}).get("analytics", "true")
    with tempfile.TemporaryDirectory() as outside, chdir(workspace if repo.is_dir() else outside):
        enabled = is_enabled()  # it reads the config of the repo around the working directory, if any
    variable = os.environ.get("DVC_NO_ANALYTICS", "unset")
    rows = [_off("telemetry DVC", not enabled, f"dvc.analytics.is_enabled(): DVC_NO_ANALYTICS={variable}, {where}")]
    if repo.is_dir():
        rows.append(_off("telemetry DVC workspace config", not to_bool(analytics), f"core.analytics={analytics}"))
    return rows
