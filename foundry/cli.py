"""`foundry`: the command line. Heavy libraries are imported inside each command, so `--help` is instant."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from foundry.cli_adapt import add_adapt_commands
from foundry.cli_align import add_commands as add_alignment_commands
from foundry.cli_config import add_config_command
from foundry.cli_search import add_search_command
from foundry.config import ConfigError, FoundryConfig, load_config
from foundry.env import configure_environment, foundry_home

DEFAULT_CONFIG = Path("params.yaml")


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="YAML config file (default: ./params.yaml when present, else built-in defaults)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one value, e.g. --set train.max_steps=100 (repeatable)",
    )


def _load(args: argparse.Namespace) -> FoundryConfig:
    path = args.config if args.config else (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    return load_config(path, args.overrides)


def cmd_run(args: argparse.Namespace) -> int:
    config = _load(args)
    from flows.train_pipeline import train_pipeline

    print(_summary_text(train_pipeline(config=config)))
    return 0


def _summary_text(result) -> str:
    from foundry.evaluation.report import pipeline_summary

    return pipeline_summary(result, foundry_home())


def cmd_retrain(args: argparse.Namespace) -> int:
    config = _load(args)
    from flows.retrain import retrain
    from foundry.contracts import SkippedRun

    result = retrain(config=config)
    if isinstance(result, SkippedRun):
        from foundry.summaries import skipped_summary

        print(skipped_summary(result))
    else:
        print(_summary_text(result) + f"\nparent     {result.parent}")
    return 0


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def cmd_up(args: argparse.Namespace) -> int:
    import signal
    import time

    from foundry import ops

    signal.signal(signal.SIGTERM, _interrupted)  # `kill` stops both servers, as Ctrl-C does

    servers = ops.up(args.prefect_port, args.mlflow_port, args.artifacts)
    prefect, mlflow = servers
    print(
        f"Prefect UI  {prefect.url}\nMLflow UI   {mlflow.url}\n"
        f"Use them:   export PREFECT_API_URL={prefect.url}/api MLFLOW_TRACKING_URI={mlflow.url}\n"
        f"Logs in {foundry_home() / 'logs'}; Ctrl-C stops both.",
        flush=True,
    )
    try:
        while all(s.process.poll() is None for s in servers):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        ops.stop(servers)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    config = _load(args)
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        raise RuntimeError("foundry serve needs a Prefect server: start one with `foundry up` and set PREFECT_API_URL")
    from flows.deployments import DEPLOYMENTS, serve

    names = ", ".join(f"{d.name} ({config.retrain.cron})" if d.scheduled else d.name for d in DEPLOYMENTS)
    print(f"serving deployments {names}; UI {api.removesuffix('/api')}", flush=True)
    serve(config, automations=args.automations)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from foundry.ops import doctor

    rows = doctor()
    for check, ok, detail in rows:
        print(f"{'ok ' if ok else 'BAD'}  {check:36s} {detail}")
    return 0 if all(ok for _, ok, _ in rows) else 1


def cmd_acquire(args: argparse.Namespace) -> int:
    from foundry.data.acquire import acquire_source

    manifest = acquire_source(_load(args).data, args.out)
    print(f"{manifest.files} files, {manifest.bytes} bytes, digest {manifest.digest} -> {args.out}")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from foundry.contracts import SourceManifest
    from foundry.data.validate import validate_dataset
    from tasks.data_parallel import run_prepare

    config = _load(args)
    manifest = run_prepare(SourceManifest.read(args.manifest), config, args.out).manifest
    validate_dataset(args.out, config, args.out.parent / f"{args.out.name}_validation.json")
    print(f"{manifest.train_tokens} train / {manifest.holdout_tokens} holdout tokens -> {args.out}")
    return 0


def _model_uri(text: str):
    """A MODEL_URI argument, parsed; a malformed one is a usage error naming the forms accepted."""
    from foundry.model_uri import ModelUri

    try:
        return ModelUri.parse(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def cmd_promote(args: argparse.Namespace) -> int:
    import getpass

    from foundry.registry.versions import promote_manually
    from tasks.locks import promotion_lock

    name = _model_uri(args.model_uri).name
    with promotion_lock(name, foundry_home()):  # not while a flow judges and publishes the same model
        record = promote_manually(args.model_uri, args.reason, args.who or getpass.getuser())
    print(
        f"models:/{record['name']}/{record['version']} is now champion "
        f"(was: {record['replaced_champion'] or 'none'}; by {record['promoted_by']}: {record['promotion_reason']})"
    )
    return 0


def cmd_reregister(args: argparse.Namespace) -> int:
    from foundry.registry.versions import reregister

    name = _model_uri(args.model_uri).name
    version = reregister(args.model_uri, foundry_home())
    print(f"models:/{name}/{version} holds the weights of {args.model_uri} and carries its code; aliases unchanged")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from foundry.registry.lineage import format_lineage, lineage

    chain = lineage(args.model_uri)
    print(json.dumps([r.model_dump() for r in chain], indent=1) if args.json else format_lineage(chain))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from flows.reproduce import reproduce
    from foundry.summaries import reproduce_summary

    result = reproduce(model_uri=args.model_uri, force=args.force)
    print(reproduce_summary(result))
    return 0 if result.identical else 1


def cmd_hydrate(args: argparse.Namespace) -> int:
    from foundry.contracts import DataVersion, check_data_version
    from foundry.data.hydrate import hydrate_version

    try:
        check_data_version(args.data_version)
    except ValueError as exc:
        raise ConfigError(f"DATA_VERSION: {exc}") from None
    print(hydrate_version(DataVersion(data_version=args.data_version, remote=args.remote), foundry_home()))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from foundry.training.plan import format_plan, parse_bytes

    try:
        device_memory = parse_bytes(args.device_memory) if args.device_memory else None
    except ValueError as exc:
        raise ConfigError(f"--device-memory: {exc}") from None
    print(format_plan(_load(args), device_memory))
    return 0


def cmd_deployments(args: argparse.Namespace) -> int:
    from flows.deployments import prefect_yaml

    text = prefect_yaml(_load(args))
    if args.write:
        args.write.write_text(text)
    else:
        print(text, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foundry",
        description="Raw text to a trained, validated, registered model.",
        epilog="State lives under $FOUNDRY_HOME (default ./.foundry). Set MLFLOW_TRACKING_URI or "
        "PREFECT_API_URL to use servers instead of the embedded defaults.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the whole pipeline flow (train_pipeline)")
    _config_args(run)
    run.set_defaults(func=cmd_run)

    retrain = commands.add_parser("retrain", help="fine-tune the champion on what is new in its source (retrain flow)")
    _config_args(retrain)
    retrain.set_defaults(func=cmd_retrain)

    up = commands.add_parser("up", help="start a Prefect server and an MLflow server on 127.0.0.1 (Ctrl-C stops them)")
    up.add_argument("--prefect-port", type=int, default=4200)
    up.add_argument("--mlflow-port", type=int, default=5000)
    up.add_argument(
        "--artifacts", help="where the MLflow server stores artifacts (default: under $FOUNDRY_HOME; s3://... works)"
    )
    up.set_defaults(func=cmd_up)

    serve = commands.add_parser(
        "serve",
        help="serve the deployments against PREFECT_API_URL: train, retrain (on its schedule), reproduce, search, "
        "align, finetune, merge",
    )
    _config_args(serve)
    serve.add_argument("--automations", action="store_true", help="also create flows/automations.py's example")
    serve.set_defaults(func=cmd_serve)

    doctor = commands.add_parser("doctor", help="versions, backends and whether they answer, telemetry switches")
    doctor.set_defaults(func=cmd_doctor)

    acquire = commands.add_parser("acquire", help="DVC stage: list and fingerprint data.source")
    _config_args(acquire)
    acquire.add_argument("--out", type=Path, default=Path("source_manifest.json"), help="manifest to write")
    acquire.set_defaults(func=cmd_acquire)

    prepare = commands.add_parser("prepare", help="DVC stage: clean, tokenize, shard and validate")
    _config_args(prepare)
    prepare.add_argument("--manifest", type=Path, default=Path("source_manifest.json"), help="source manifest to read")
    prepare.add_argument("--out", type=Path, default=Path("prepared"), help="dataset folder to write")
    prepare.set_defaults(func=cmd_prepare)

    promote = commands.add_parser("promote", help="make a model version champion after review, recording who and why")
    promote.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@challenger")
    promote.add_argument("--reason", required=True, help="why it is promoted (kept as a version tag)")
    promote.add_argument("--who", help="reviewer (default: the current user)")
    promote.set_defaults(func=cmd_promote)

    reregister = commands.add_parser(
        "reregister", help="register a version's weights again as a new version that carries its own code"
    )
    reregister.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    reregister.set_defaults(func=cmd_reregister)

    lineage = commands.add_parser(
        "lineage", help="print a model's chain: version, run, data, source, commit, config, parent"
    )
    lineage.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    lineage.add_argument("--json", action="store_true", help="machine-readable output")
    lineage.set_defaults(func=cmd_lineage)

    reproduce = commands.add_parser("reproduce", help="hydrate a model's data version and re-train it with its config")
    reproduce.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    reproduce.add_argument("--force", action="store_true", help="re-train even when the code's commit differs")
    reproduce.set_defaults(func=cmd_reproduce)

    hydrate = commands.add_parser("hydrate", help="pull one data version into $FOUNDRY_HOME/hydrated/ and verify it")
    hydrate.add_argument("data_version", help="the DVC content hash (the data_version tag)")
    hydrate.add_argument("--remote", required=True, help="the DVC remote it was pushed to (the data.remote tag)")
    hydrate.set_defaults(func=cmd_hydrate)

    plan = commands.add_parser("plan", help="memory per device for the config, and the largest micro-batch that fits")
    _config_args(plan)
    plan.add_argument("--device-memory", metavar="SIZE", help="memory of one device, e.g. 80GB or 141GiB")
    plan.set_defaults(func=cmd_plan)

    add_config_command(commands, _config_args, _load)

    deployments = commands.add_parser(
        "deployments",
        help="print prefect.yaml (the deployments for workers, with the config's retrain.cron), or write it",
    )
    _config_args(deployments)
    deployments.add_argument("--write", type=Path, metavar="FILE", help="write to FILE instead of printing")
    deployments.set_defaults(func=cmd_deployments)
    add_alignment_commands(commands, _config_args, _load)
    add_search_command(commands, _config_args, _load, _summary_text)
    add_adapt_commands(commands, _config_args, _load, _summary_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_environment()
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("foundry: interrupted", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"foundry: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # one paragraph for people; the traceback is in the Prefect/MLflow logs
        kind = type(exc).__name__
        print(f"foundry: {args.command} failed ({kind}): {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
