"""Where state lives and which switches keep every library offline.

`configure_environment()` is the one set-up call. Entry points make it (the CLI, each flow module,
which a Prefect worker imports directly, the training rank), before Prefect, MLflow, DVC or Great
Expectations is imported: several of them read their settings once, at import. Nothing else in the
package changes the environment, but `foundry.core.redact.keep`, which keeps there a URL a config was given with
its credential (the config keeps it redacted). `positive_setting` reads an operator's number from it (a bound on the
logs, the promotion lock's wait for an absent Prefect server).
"""

from __future__ import annotations

import contextlib
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


# SQLite gives the files beside a database (its journal, write-ahead log and shared memory) the database's own
# mode: a private database keeps them private.
SQLITE_FILES = ("", "-journal", "-wal", "-shm")


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


def positive_setting(name: str, default: float) -> float:
    """The operator's number in the variable `name` (a bound, a wait), `default` where it is unset or blank; a value
    that is not a positive finite number is an error naming the variable, not a bound that bounds nothing."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name}={raw!r}: expected a positive number")
    return value


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
    _private_home(home)
    return home


def private(path: str, flags: int) -> int:
    """An `opener` for `open`: a file created for its owner alone (0600). Logs quote configs, paths, tracebacks."""
    return os.open(path, flags, 0o600)


def _private_home(home: Path) -> None:
    """The home created 0700 (one that exists keeps the mode its owner chose), and Foundry's state in it private
    whatever the home's mode: Prefect's and MLflow's folders and DVC's config and site-cache folders 0700, the
    embedded databases 0600. DVC creates its site cache's `repo/` 0777 under a zero umask, and any missing parent
    with it (for users sharing one cache): made 0700 first, `makedirs(exist_ok=True)` leaves them as they are."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    prefect = Path(os.environ["PREFECT_HOME"])
    dvc = [Path(os.environ[name]) for name in ("DVC_GLOBAL_CONFIG_DIR", "DVC_SYSTEM_CONFIG_DIR")]
    for folder in [prefect, home / "mlflow", home / "logs", *dvc, Path(os.environ["DVC_SITE_CACHE_DIR"]) / "repo"]:
        if not folder.is_relative_to(home):  # a folder the user pointed elsewhere is theirs to set
            continue
        inside = folder.relative_to(home)
        for step in reversed([inside, *inside.parents][:-1]):  # from the home down, the home itself left out
            _private(home / step, 0o700)
    prefect.mkdir(parents=True, exist_ok=True)  # SQLite creates database files, not their folders
    if os.environ["MLFLOW_TRACKING_URI"] == mlflow_db_uri(home):
        database = home / "mlflow" / "mlflow.db"
        os.close(private(str(database), os.O_WRONLY | os.O_CREAT))  # SQLite keeps the mode of a file it finds
        _private_databases(database)
    if prefect.is_relative_to(home):
        _private_databases(prefect / "prefect.db")


def _private_databases(database: Path) -> None:
    """A SQLite database and the files beside it, where they exist, 0600. Prefect's is never made here (purge
    takes a `prefect.db` for a store holding runs): one its temporary server made is private from the next start
    on, inside its 0700 folder meanwhile."""
    for suffix in SQLITE_FILES:
        if database.with_name(database.name + suffix).is_file():
            _private(database.with_name(database.name + suffix), 0o600)


def _private(path: Path, mode: int) -> None:
    """`path` (a folder, created when missing, or a file) given `mode`; a symbolic link (its target is elsewhere)
    or a file another user owns is left as it is."""
    if path.is_symlink():
        return
    if mode == 0o700:
        path.mkdir(mode=mode, exist_ok=True)
    with contextlib.suppress(PermissionError):
        path.chmod(mode)
