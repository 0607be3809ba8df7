"""What a run started from a deployment may point at: the operator's settings, not the form's.

Anyone who can press Run in the Prefect UI sets the whole config. Some of its keys reach infrastructure:
`data.scheduler` and `search.scheduler` (a Dask address: it speaks pickle), `data.remote` (where DVC pushes
the dataset), `search.storage` (a file or database the study writes), and the paths a run reads
(`data.source`/`data.sources`, `tokenizer.from_file`, `train.init_from`, a pickle). Together they could
push a worker's file to a remote of the submitter's choosing. So a flow run started from a deployment
(`foundry serve`, a `prefect.yaml` worker) is refused, before any work, when one of them leaves what the
worker's operator allowed in its environment:

- FOUNDRY_ALLOWED_SCHEDULERS  Dask scheduler addresses, comma-separated ('' and 'local' always pass)
- FOUNDRY_ALLOWED_REMOTES     DVC remote URLs or folders; a value under one passes ('' always passes)
- FOUNDRY_ALLOWED_STORAGES    Optuna storages ('' always passes: a journal under $FOUNDRY_HOME/search/)
- FOUNDRY_SOURCE_ROOTS        folders and URL prefixes sources may lie under, comma-separated
                              (stdlib:// and, for the two model files, $FOUNDRY_HOME always pass)
- FOUNDRY_ALLOWED_APPLY       the deployments whose runs may delete (`purge`, `gc`), comma-separated; unset: none,
                              so from the UI they list what they would delete and delete nothing

The purge deployment's `remote` is held to FOUNDRY_ALLOWED_REMOTES, and a reproduction to the lists its recorded
config and data version meet (its recorded sources aside: it hydrates the data version and reads no source).

Unset, each allows only its defaults; `foundry serve --config FILE` adds that file's own values (the
operator chose them). The CLI run by the operator on their own machine is trusted and not checked: the
person typing the command already has the worker's files.
"""

from __future__ import annotations

import os
import sysconfig
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.redact import redact_url, without_credentials

SCHEDULERS, REMOTES, STORAGES, ROOTS, APPLIES = (
    "FOUNDRY_ALLOWED_SCHEDULERS",
    "FOUNDRY_ALLOWED_REMOTES",
    "FOUNDRY_ALLOWED_STORAGES",
    "FOUNDRY_SOURCE_ROOTS",
    "FOUNDRY_ALLOWED_APPLY",
)


class NotAllowed(ValueError):
    """A deployment's parameters point where the worker's operator did not allow; names each key."""


@dataclass(frozen=True)
class OperatorSettings:
    schedulers: tuple[str, ...] = ()
    remotes: tuple[str, ...] = ()
    storages: tuple[str, ...] = ()
    source_roots: tuple[str, ...] = ()
    applies: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorSettings:
        env = os.environ if env is None else env

        def listed(name: str) -> tuple[str, ...]:
            return tuple(item.strip() for item in env.get(name, "").split(",") if item.strip())

        return cls(listed(SCHEDULERS), listed(REMOTES), listed(STORAGES), listed(ROOTS), listed(APPLIES))


def served_config_allowed(config: FoundryConfig, env: dict[str, str]) -> dict[str, str]:
    """`env`'s allow-lists with the served config's own values added: `foundry serve --config FILE` is the
    operator's choice, and the scheduled retrain runs with it."""
    added = {
        SCHEDULERS: [config.data.scheduler, config.search.scheduler],
        REMOTES: [config.data.remote],
        STORAGES: [config.search.storage],
        ROOTS: [_root_of(source) for source in config.data.source_list if not source.startswith("stdlib://")],
    }
    updated = {}
    for name, values in added.items():
        listed = [item for item in env.get(name, "").split(",") if item.strip()]
        listed += [value for value in values if value and value != "local" and value not in listed]
        if listed:
            updated[name] = ",".join(listed)
    return updated


def _root_of(source: str) -> str:
    """A source as a root: a URL as it is, a glob as the folder it lists."""
    return source if "://" in source else str(Path(*_fixed_parts(Path(source).expanduser())).resolve())


def check_deployment_config(config: FoundryConfig, settings: OperatorSettings, home: Path) -> None:
    """Raise `NotAllowed` naming every key of `config` outside `settings`; nothing when all are inside."""
    problems = refusals(config, settings, home)
    if problems:
        raise NotAllowed("refused for a run started from a deployment: " + "; ".join(problems))


def check_fleet_operation(name: str, apply: bool, remote: str, settings: OperatorSettings) -> None:
    """A `purge` or `gc` run from a deployment: `remote` (one more DVC remote a purge looks in and rewrites) only
    where the operator allows remotes, and deleting (`apply`) only for the deployments the operator lists."""
    problems = []
    if not _under_any(remote, settings.remotes, {""}):
        problems.append(
            f"remote = {redact_url(remote)!r} is not allowed (the worker's operator can allow it in {REMOTES})"
        )
    if apply and name not in settings.applies:
        problems.append(f"apply = true is not allowed for {name} (the worker's operator can allow it in {APPLIES})")
    if problems:
        raise NotAllowed("refused for a run started from a deployment: " + "; ".join(problems))


def check_reproduction(config: FoundryConfig, remote: str, settings: OperatorSettings, home: Path) -> None:
    """A reproduction from a deployment: the recorded config as any run's (its sources aside: a reproduction
    hydrates the data version and reads none) and the remote the data version is pulled from."""
    problems = [p for p in refusals(config, settings, home) if not p.startswith("data.source ")]
    if not _under_any(remote, settings.remotes, {"", str(home / "dvc-remote")}):  # or the home's own remote
        problems.append(
            f"the data version's remote {redact_url(remote)!r} is not allowed (the worker's operator can allow it in "
            f"{REMOTES})"
        )
    if problems:
        raise NotAllowed("refused for a run started from a deployment: " + "; ".join(problems))


def refusals(config: FoundryConfig, settings: OperatorSettings, home: Path) -> list[str]:
    checks = [
        ("data.scheduler", config.data.scheduler, _listed(config.data.scheduler, settings.schedulers, {"", "local"})),
        ("search.scheduler", config.search.scheduler, _listed(config.search.scheduler, settings.schedulers, {""})),
        ("data.remote", config.data.remote, _under_any(config.data.remote, settings.remotes, {""})),
        ("search.storage", config.search.storage, _listed(config.search.storage, settings.storages, {""})),
        *[
            ("data.source", source, _source_allowed(source, settings.source_roots))
            for source in config.data.source_list
        ],
        ("tokenizer.from_file", config.tokenizer.from_file, _file_allowed(config.tokenizer.from_file, settings, home)),
        ("train.init_from", config.train.init_from, _file_allowed(config.train.init_from, settings, home)),
    ]
    variable = {"data.scheduler": SCHEDULERS, "search.scheduler": SCHEDULERS, "data.remote": REMOTES}
    variable |= {"search.storage": STORAGES}
    return [
        f"{key} = {redact_url(value)!r} is not allowed (the worker's operator can allow it in {variable.get(key, ROOTS)})"
        for key, value, allowed in checks
        if not allowed
    ]


def _listed(value: str, allowed: tuple[str, ...], defaults: set[str]) -> bool:
    return value in defaults or without_credentials(value) in {without_credentials(a) for a in allowed}


def _under_any(value: str, allowed: tuple[str, ...], defaults: set[str]) -> bool:
    """Equal to an allowed URL or folder, or under one (`s3://bucket/team` allows `s3://bucket/team/x`)."""
    if value in defaults:
        return True
    if "://" not in value:
        return _path_under(value, tuple(a for a in allowed if "://" not in a))
    plain = without_credentials(value)
    if ".." in plain.split("/"):
        return False
    return any(plain == root or plain.startswith(root.rstrip("/") + "/") for root in map(without_credentials, allowed))


def _path_under(value: str, roots: tuple[str, ...]) -> bool:
    path = Path(value).expanduser()
    if any(part == ".." for part in path.parts):  # a glob's `..` after its wildcard escapes any prefix check
        return False
    resolved = Path(*_fixed_parts(path)).resolve()  # a glob: the folder it lists
    return any(resolved.is_relative_to(Path(root).expanduser().resolve()) for root in roots)


def _fixed_parts(path: Path) -> list[str]:
    """The components before the first wildcard: the folder a glob lists."""
    fixed = []
    for part in path.parts:
        if any(ch in part for ch in "*?["):
            break
        fixed.append(part)
    return fixed


def _source_allowed(source: str, roots: tuple[str, ...]) -> bool:
    if source.startswith("stdlib://"):
        stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
        return (stdlib / source.removeprefix("stdlib://")).resolve().is_relative_to(stdlib)
    if urllib.parse.urlparse(source).scheme and "://" in source:
        return _under_any(source, roots, set())
    return _path_under(source, tuple(r for r in roots if "://" not in r))


def _file_allowed(value: str, settings: OperatorSettings, home: Path) -> bool:
    """A file the run reads (a tokenizer, a checkpoint: a pickle): under $FOUNDRY_HOME or a source root."""
    if not value:
        return True
    if "://" in value:
        return False
    return _path_under(value, (str(home), *(r for r in settings.source_roots if "://" not in r)))
