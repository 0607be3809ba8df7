"""A registered version exported once, attached to it, and reused: `foundry export MODEL_URI --format F --out DIR`.

The first export of a version writes the format's files (`FORMATS`), logs them as an artifact of the version's
run (`export/F/NAME-vN/format-K`, K the exporter's `FORMAT_VERSION`) and tags the version `foundry.export.F` with
that artifact path, so a reviewer in the MLflow UI sees it. Later exports download that artifact instead of writing
it again, but only when the tag is exactly the path this exporter would write and the run still holds files there:
a tag from an older exporter (another K), one copied from another version or set by hand, or an artifact deleted
since, is exported again and re-tagged. Registry errors propagate (fail closed): an export never guesses a version,
writes one it could not resolve, or takes a failed artifact listing for an absent artifact.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from foundry.core.fs import remove_tree
from foundry.core.model_uri import ModelUri
from foundry.export import FORMAT_VERSION

# format -> (module, function(saved, tokenizer_file, out_dir, source=URI) -> Path); imported when asked for
FORMATS = {"hf": ("foundry.export.hf", "write_hf"), "gguf": ("foundry.export.gguf", "write_gguf")}
MARKER = "foundry-export.json"  # beside the exported files in --out, never in the logged artifact


class ExportRefused(ValueError):
    """An export that would overwrite a folder it did not write, or of a format Foundry does not write."""


@dataclass(frozen=True)
class Export:
    model_uri: str  # pinned: models:/NAME/VERSION
    fmt: str
    out_dir: Path
    artifact: str  # the artifact path under the version's run
    run_id: str
    reused: bool


def tag_key(fmt: str) -> str:
    return f"foundry.export.{fmt}"


def writer(fmt: str):
    if fmt not in FORMATS:
        raise ExportRefused(f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}")
    module, function = FORMATS[fmt]
    return getattr(importlib.import_module(module), function)


def check_out_dir(out_dir: Path) -> None:
    """An absent or empty folder, or one a previous export wrote (it holds `MARKER`); else `ExportRefused`."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportRefused(f"--out {out_dir} is a file, not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MARKER).is_file():
        raise ExportRefused(
            f"--out {out_dir} holds files that no export wrote: choose an empty or new folder (nothing was changed)"
        )


def artifact_path(pinned: ModelUri, fmt: str) -> str:
    """Where this exporter logs `fmt` of `pinned` under the version's run; its version tag holds the same text."""
    return f"export/{fmt}/{pinned.folder}/format-{FORMAT_VERSION}"


def _reusable(version, fmt: str, artifact: str) -> bool:
    """Whether the version carries this exporter's export of `fmt`: its tag is `artifact`, and the run holds files
    there. The tag's text is only compared, never used as a path."""
    from foundry.runtime import tracking

    if version.tags.get(tag_key(fmt)) != artifact:
        return False
    # an empty listing is an absent (deleted) artifact; an error listing it propagates
    return bool(tracking.client().list_artifacts(version.run_id, artifact))


def _write(version, fmt: str, home: Path, dest: Path) -> None:
    from foundry.registry.versions import download
    from models.gpt import load_saved

    artifacts = download(version, home)
    saved = load_saved(artifacts / "model.pt")
    writer(fmt)(saved, artifacts / "tokenizer.json", dest, source=str(ModelUri.of(version)))


def export_version(model_uri: str | ModelUri, fmt: str, out_dir: Path, home: Path) -> Export:
    """The export of a registered version in `fmt` in `out_dir`: downloaded when the version already carries
    this exporter's (`_reusable`), else written from its `model.pt` and `tokenizer.json`, logged under its run
    and tagged on it."""
    import mlflow

    from foundry.registry.versions import resolve
    from foundry.runtime import tracking

    writer(fmt)  # an unknown format, or a writer that cannot be imported, before anything else
    out_dir = Path(out_dir).absolute()
    check_out_dir(out_dir)
    version = resolve(model_uri)
    pinned = ModelUri.of(version)
    artifact = artifact_path(pinned, fmt)
    reused = _reusable(version, fmt, artifact)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        if reused:
            local = mlflow.artifacts.download_artifacts(
                run_id=version.run_id, artifact_path=artifact, dst_path=str(scratch)
            )
            files = Path(local)
        else:
            files = scratch / "files"
            _write(version, fmt, home, files)
            tracking.log_artifact(version.run_id, files, artifact)
            tracking.client().set_model_version_tag(pinned.name, pinned.version, tag_key(fmt), artifact)
        record = {"model_uri": str(pinned), "format": fmt, "format_version": FORMAT_VERSION, "artifact": artifact}
        record |= {"run_id": version.run_id}
        (files / MARKER).write_text(json.dumps(record, indent=1) + "\n")
        _replace(files, out_dir)
    finally:
        remove_tree(scratch, within=out_dir.parent, ignore_errors=True)
    return Export(str(pinned), fmt, out_dir, artifact, version.run_id, reused)


def _replace(files: Path, out_dir: Path) -> None:
    """`out_dir` becomes `files` (same file system): an empty folder or a previous export is replaced."""
    check_out_dir(out_dir)  # again: the folder may have gained files while the export was written
    if out_dir.is_dir():
        remove_tree(out_dir, within=out_dir.parent)
    os.rename(files, out_dir)
