"""`foundry acquire`, `prepare` and `hydrate`: the data stages as dvc.yaml runs them, and one data version
pulled onto this node."""

from __future__ import annotations

import argparse
from pathlib import Path

from foundry.cli.common import config_args, load
from foundry.config import ConfigError
from foundry.runtime.env import foundry_home


def cmd_acquire(args: argparse.Namespace) -> int:
    from foundry.core import workload

    config = load(args)
    manifest = workload.for_config(config).acquire(config, args.out)
    print(f"{manifest.files} files, {manifest.bytes} bytes, digest {manifest.digest} -> {args.out}")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from foundry.core import workload
    from foundry.core.contracts import SourceManifest
    from foundry.core.preparing import DataBasis, Validating
    from foundry.data.purged import purged_documents
    from foundry.data.validate import validate_dataset
    from tasks.data_parallel import run_prepare

    config = load(args)
    purged = frozenset(purged_documents(foundry_home()))  # a purge's documents, should the source still hold them
    basis = DataBasis(purged=purged)
    manifest = run_prepare(SourceManifest.read(args.manifest), config, args.out, basis=basis).manifest
    validate_dataset(Validating(args.out, config, args.out.parent / f"{args.out.name}_validation.json"))
    print(f"{workload.for_config(config).prepared_line(manifest)} -> {args.out}")
    return 0


def cmd_hydrate(args: argparse.Namespace) -> int:
    from foundry.core.contracts import DataVersion, check_data_version
    from foundry.data.hydrate import hydrate_version

    try:
        check_data_version(args.data_version)
    except ValueError as exc:
        raise ConfigError(f"DATA_VERSION: {exc}") from None
    print(hydrate_version(DataVersion(data_version=args.data_version, remote=args.remote), foundry_home()))
    return 0


def add_commands(commands) -> None:
    acquire = commands.add_parser("acquire", help="DVC stage: list and fingerprint data.source")
    config_args(acquire)
    acquire.add_argument("--out", type=Path, default=Path("source_manifest.json"), help="manifest to write")
    acquire.set_defaults(func=cmd_acquire)

    prepare = commands.add_parser("prepare", help="DVC stage: clean, tokenize, shard and validate")
    config_args(prepare)
    prepare.add_argument("--manifest", type=Path, default=Path("source_manifest.json"), help="source manifest to read")
    prepare.add_argument("--out", type=Path, default=Path("prepared"), help="dataset folder to write")
    prepare.set_defaults(func=cmd_prepare)

    hydrate = commands.add_parser("hydrate", help="pull one data version into $FOUNDRY_HOME/hydrated/ and verify it")
    hydrate.add_argument("data_version", help="the DVC content hash (the data_version tag)")
    hydrate.add_argument("--remote", required=True, help="the DVC remote it was pushed to (the data.remote tag)")
    hydrate.set_defaults(func=cmd_hydrate)
