"""`foundry export`: a registered version in a format other tools open, attached to the version and reused."""

from __future__ import annotations

import argparse
from pathlib import Path

from foundry.cli.common import allow_purged_arg, model_uri, refuse_purged
from foundry.runtime.env import foundry_home

FORMATS = ("hf", "gguf")


def cmd_export(args: argparse.Namespace) -> int:
    from foundry.export.publish import export_version

    refuse_purged([args.model_uri], args.allow_purged, "exported")
    done = export_version(model_uri(args.model_uri), args.format, args.out, foundry_home())
    how = "reused the export" if done.reused else "exported and attached"
    print(
        f"{done.model_uri} as {done.fmt}: {how} (run {done.run_id} artifact {done.artifact}, "
        f"version tag foundry.export.{done.fmt}); files in {done.out_dir}"
    )
    return 0


def add_commands(commands) -> None:
    export = commands.add_parser(
        "export", help="write a registered version as a transformers folder (hf) or a llama.cpp file (gguf)"
    )
    export.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    export.add_argument("--format", choices=FORMATS, required=True, help="hf: transformers; gguf: llama.cpp")
    export.add_argument("--out", type=Path, required=True, help="folder to write (new, empty, or a previous export's)")
    allow_purged_arg(export, "export")
    export.set_defaults(func=cmd_export)
