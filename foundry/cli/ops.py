"""`foundry up`, `serve`, `doctor`, `plan` and `deployments`: running Foundry's servers and workers, and
checking a machine and a config before a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from foundry.cli.common import config_args, load
from foundry.config import ConfigError
from foundry.runtime.env import foundry_home


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def cmd_up(args: argparse.Namespace) -> int:
    import signal
    import time

    from foundry.ops import servers as ops

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

    config = load(args)
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        raise RuntimeError("foundry serve needs a Prefect server: start one with `foundry up` and set PREFECT_API_URL")
    from flows.deployments import DEPLOYMENTS, serve

    names = ", ".join(f"{d.name} ({config.retrain.cron})" if d.scheduled else d.name for d in DEPLOYMENTS)
    print(f"serving deployments {names}; UI {api.removesuffix('/api')}", flush=True)
    serve(config, automations=args.automations)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from foundry.ops.doctor import doctor

    rows = doctor()
    for check, ok, detail in rows:
        print(f"{'ok ' if ok else 'BAD'}  {check:36s} {detail}")
    return 0 if all(ok for _, ok, _ in rows) else 1


def cmd_plan(args: argparse.Namespace) -> int:
    from foundry.training.energy_plan import format_energy, planned
    from foundry.training.plan import format_plan, parse_bytes

    try:
        device_memory = parse_bytes(args.device_memory) if args.device_memory else None
    except ValueError as exc:
        raise ConfigError(f"--device-memory: {exc}") from None
    config = load(args)
    print(format_plan(config, device_memory))
    print(format_energy(config, planned(config)))
    return 0


def cmd_deployments(args: argparse.Namespace) -> int:
    from flows.deployments import prefect_yaml

    text = prefect_yaml(load(args))
    if args.write:
        args.write.write_text(text)
    else:
        print(text, end="")
    return 0


def add_commands(commands) -> None:
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
        "align, finetune, merge, evaluate, gc, purge",
    )
    config_args(serve)
    serve.add_argument("--automations", action="store_true", help="also create flows/automations.py's example")
    serve.set_defaults(func=cmd_serve)

    doctor = commands.add_parser("doctor", help="versions, backends and whether they answer, telemetry switches")
    doctor.set_defaults(func=cmd_doctor)

    plan = commands.add_parser(
        "plan", help="memory per device for the config, the largest micro-batch that fits, and its time and energy"
    )
    config_args(plan)
    plan.add_argument("--device-memory", metavar="SIZE", help="memory of one device, e.g. 80GB or 141GiB")
    plan.set_defaults(func=cmd_plan)

    deployments = commands.add_parser(
        "deployments",
        help="print prefect.yaml (the deployments for workers, with the config's retrain.cron), or write it",
    )
    config_args(deployments)
    deployments.add_argument("--write", type=Path, metavar="FILE", help="write to FILE instead of printing")
    deployments.set_defaults(func=cmd_deployments)
