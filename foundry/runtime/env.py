"""Where state lives and which switches keep every library offline.

`configure_environment()` is the one set-up call. Entry points make it (the CLI, each flow module,
which a Prefect worker imports directly, the training rank), before Prefect, MLflow, DVC or Great
Expectations is imported: several of them read their settings once, at import. Nothing else in the
package changes the environment, but `foundry.core.redact.keep`, which keeps there a URL a config was given with
its credential (the config keeps it redacted).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

# Values we force because a user-supplied alternative would send data off the machine.
TELEMETRY_OFF = {
    "DO_NOT_TRACK": "true",  # Prefect client and MLflow; MLflow accepts only the string "true"
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout: dvc.yaml, code that makes data, git
# The packages whose versions every run and model version records, and `foundry doctor` lists.
PACKAGES = ("torch", "lightning", "prefect", "mlflow", "dvc", "great-expectations", "tokenizers")


def foundry_home() -> Path:
    return Path(os.environ.get("FOUNDRY_HOME", ".foundry")).expanduser().resolve()


def mlflow_db_uri(home: Path) -> str:
    return f"sqlite:///{home / 'mlflow' / 'mlflow.db'}"


def uses_embedded_mlflow() -> bool:
    return os.environ.get("MLFLOW_TRACKING_URI", "").startswith("sqlite:") or "MLFLOW_TRACKING_URI" not in os.environ


def s3_endpoint_url() -> str | None:
    """The S3 endpoint from the standard AWS variables (MinIO, moto or any S3-compatible store)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def package_versions() -> dict[str, str]:
    """{package: version or 'absent'} for `PACKAGES`."""
    from importlib import metadata

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _tracking_credentials() -> None:
    """A `user:password@` in MLFLOW_TRACKING_URI moves to MLflow's own variables, which it sends as basic auth:
    no message MLflow writes (and Prefect stores with a failed run) quotes the password."""
    parts = urllib.parse.urlsplit(os.environ["MLFLOW_TRACKING_URI"])
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return
    os.environ["MLFLOW_TRACKING_USERNAME"] = urllib.parse.unquote(parts.username or "")
    os.environ["MLFLOW_TRACKING_PASSWORD"] = urllib.parse.unquote(parts.password or "")
    host = parts.netloc.rsplit("@", 1)[1]
    os.environ["MLFLOW_TRACKING_URI"] = urllib.parse.urlunsplit(parts._replace(netloc=host))


def configure_environment() -> Path:
    """Point every component at $FOUNDRY_HOME unless the user configured servers, and turn telemetry off."""
    home = foundry_home()
    os.environ["FOUNDRY_HOME"] = str(home)
    os.environ.update(TELEMETRY_OFF)
    defaults = {
        "PREFECT_HOME": str(home / "prefect"),
        "MLFLOW_TRACKING_URI": mlflow_db_uri(home),
        "DVC_GLOBAL_CONFIG_DIR": str(home / "dvc-config" / "global"),
        "DVC_SITE_CACHE_DIR": str(home / "dvc-config" / "site-cache"),
        "DVC_SYSTEM_CONFIG_DIR": str(home / "dvc-config" / "system"),
        # torch.compile's kernels (train.compile), cached across runs: not in the shared /tmp.
        "TORCHINDUCTOR_CACHE_DIR": str(home / "cache" / "torchinductor"),
        # The temporary Prefect server takes ~15 s on a fresh home; the default 20 s timeout is too tight on 2 cores.
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PREFECT_LOGGING_LEVEL": "INFO",
        "PREFECT_LOGGING_EXTRA_LOGGERS": "tasks,models,foundry,lightning.pytorch",  # training lines reach the run
        "TOKENIZERS_PARALLELISM": "true",
        "GIT_PYTHON_REFRESH": "quiet",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        # Library code also runs outside flows (the DVC stage commands, tests): no "missing flow run" warnings.
        "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    _tracking_credentials()
    # SQLite creates database files, not their folders.
    for folder in (os.environ["PREFECT_HOME"], home / "mlflow"):
        Path(folder).mkdir(parents=True, exist_ok=True)
    return home
