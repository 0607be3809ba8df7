"""A registered version exported once, attached to it, and reused: `foundry export MODEL_URI --format F --out DIR`.

The first export of a version writes the format's files by the writer its workload lists for it (`Workload.exports`;
the workload is the one the version's recorded config names, and a format it does not list is refused before any
download), logs them as an artifact of the version's run (`export/F/NAME-vN/format-K`, K the exporter's
`FORMAT_VERSION`) and tags the version `foundry.export.F` with that artifact path, so a reviewer in the MLflow UI
sees it. Later exports download that artifact instead of writing it again, but only when the tag is exactly the
path this exporter would write and the run still holds files there: a tag from an older exporter (another K), one
copied from another version or set by hand, or an artifact deleted since, is exported again and re-tagged.
Registry errors propagate (fail closed): an export never guesses a version, writes one it could not resolve, or
takes a failed artifact listing for an absent artifact.

`--out` is new, empty, or a previous export's folder holding nothing else: its `MARKER` lists the files that
export placed, and only those are replaced. A folder with anything more (a user's own script beside the weights)
is refused, everything unexpected named, nothing deleted.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from foundry.core import version_tags as tag
from foundry.core.fs import remove_tree
from foundry.core.model_uri import ModelUri
from foundry.core.version_tags import VersionTags
from foundry.core.workload import Workload
from foundry.export import FORMAT_VERSION, GPT_WRITERS

# Every format Foundry writes (`foundry export --format`): a version's workload lists those it is exported as
FORMATS = GPT_WRITERS
MARKER = "foundry-export.json"  # beside the exported files in --out (and listing them), never in the artifact


class ExportRefused(ValueError):
    """An export that would overwrite a folder it did not write, or of a format Foundry, or the version's workload,
    does not write."""


@dataclass(frozen=True)
class Export:
    model_uri: str  # pinned: models:/NAME/VERSION
    fmt: str
    out_dir: Path
    artifact: str  # the artifact path under the version's run
    run_id: str
    reused: bool


def writer(fmt: str, workload: Workload | None = None, source: str = ""):
    """The function that writes `fmt`: the one `workload` lists, else `ExportRefused` naming `source` (the version),
    what it is and the formats it has; without a workload, Foundry's writer of that format."""
    if fmt not in FORMATS:
        raise ExportRefused(f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}")
    writers = FORMATS if workload is None else workload.exports
    if fmt not in writers:
        listed = f"as {', '.join(writers)}" if writers else "in no format"
        raise ExportRefused(
            f"{source or 'this version'} is {workload.describes}: Foundry exports {workload.describes} {listed}, "
            f"not as {fmt} (nothing was written)"
        )
    module, function = writers[fmt]
    return getattr(importlib.import_module(module), function)


def workload_of(version) -> Workload:
    """The workload of a registered version, named by the config its training run recorded (as a retrain reads its
    parent's)."""
    from foundry.core.workload import for_recorded
    from foundry.registry.lineage import recorded_config

    return for_recorded(recorded_config(version))


def check_out_dir(out_dir: Path) -> None:
    """An absent or empty folder, or one a previous export wrote and nothing else: every entry in it is `MARKER` or
    a regular file the marker lists, or a folder on the way to one; else `ExportRefused`, naming what is not."""
    if out_dir.is_symlink():
        raise ExportRefused(f"--out {out_dir} is a symbolic link: give the folder it points to, or a new one")
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportRefused(f"--out {out_dir} is a file, not a folder")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not (out_dir / MARKER).is_file():
        raise ExportRefused(
            f"--out {out_dir} holds files that no export wrote: choose an empty or new folder (nothing was changed)"
        )
    listed = _listed(out_dir)
    if listed is None:
        raise ExportRefused(
            f"--out {out_dir} holds an export whose {MARKER} lists no files (an older Foundry wrote it): remove "
            "the folder yourself, keeping what you added, or choose a new one (nothing was changed)"
        )
    unexpected = _unexpected(out_dir, listed)
    if unexpected:
        shown = ", ".join(unexpected[:10]) + (f" and {len(unexpected) - 10} more" if len(unexpected) > 10 else "")
        raise ExportRefused(
            f"--out {out_dir} holds files its previous export did not write: {shown}. Move them out or choose a "
            "new folder (nothing was changed)"
        )


def _listed(out_dir: Path) -> frozenset[str] | None:
    """The files (paths relative to `out_dir`, `/`-separated) its marker says the previous export wrote; None when
    the marker holds no such list. Only compared with what a walk of `out_dir` finds, never used as a path."""
    try:
        record = json.loads((out_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return frozenset(files)


def _entries(out_dir: Path):
    """(relative name, path) of everything under `out_dir`, links included and never followed."""
    for root, dirs, files in os.walk(out_dir):  # a link to a folder lands in `dirs` and is not entered
        for name in sorted(dirs + files):
            path = Path(root) / name
            yield path.relative_to(out_dir).as_posix(), path


def _unexpected(out_dir: Path, listed: frozenset[str]) -> list[str]:
    """The entries of `out_dir` an export did not write: anything but `MARKER`, a listed regular file, or a folder
    holding one (a folder of the user's own is named with a trailing `/`, and its files too)."""
    keep = listed | {MARKER}
    folders = {parent.as_posix() for name in keep for parent in PurePosixPath(name).parents}
    unexpected = []
    for name, path in _entries(out_dir):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            unexpected.append(name)
        elif path.is_dir() and name not in folders:
            unexpected.append(f"{name}/")
        elif path.is_file() and name not in keep:
            unexpected.append(name)
    return sorted(unexpected)


def _written(files: Path) -> list[str]:
    """The files of an export about to be placed, as its marker lists them."""
    return sorted(name for name, path in _entries(files) if path.is_file() and not path.is_symlink())


def artifact_path(pinned: ModelUri, fmt: str) -> str:
    """Where this exporter logs `fmt` of `pinned` under the version's run; its version tag holds the same text."""
    return f"export/{fmt}/{pinned.folder}/format-{FORMAT_VERSION}"


def _reusable(version, fmt: str, artifact: str) -> bool:
    """Whether the version carries this exporter's export of `fmt`: its tag is `artifact`, and the run holds files
    there. The tag's text is only compared, never used as a path."""
    from foundry.runtime import tracking

    if VersionTags.export_of(version.tags, fmt) != artifact:
        return False
    # an empty listing is an absent (deleted) artifact; an error listing it propagates
    return bool(tracking.client().list_artifacts(version.run_id, artifact))


def _write(version, workload: Workload, fmt: str, home: Path, dest: Path) -> None:
    from foundry.registry.versions import download
    from models.gpt import load_saved

    write = writer(fmt, workload, str(ModelUri.of(version)))
    artifacts = download(version, home)
    saved = load_saved(artifacts / "model.pt") | _emissions(version.run_id)
    write(saved, artifacts / "tokenizer.json", dest, source=str(ModelUri.of(version)))


def _emissions(run_id: str) -> dict:
    """`co2_eq_emissions` of the version's run (its energy at its config's grid intensity), as the saved model's
    key a writer puts in its card's metadata; none for a run that recorded no energy."""
    from foundry.core.energy import co2_eq_emissions
    from foundry.core.run_tags import STAGE
    from foundry.runtime import tracking

    data = tracking.client().get_run(run_id).data
    kind = "pre-training" if data.tags.get(STAGE, "pipeline") == "pipeline" else "fine-tuning"
    emissions = co2_eq_emissions(data.metrics, data.tags, kind)
    return {} if emissions is None else {"co2_eq_emissions": emissions}


def export_version(model_uri: str | ModelUri, fmt: str, out_dir: Path, home: Path) -> Export:
    """The export of a registered version in `fmt` in `out_dir`: downloaded when the version already carries
    this exporter's (`_reusable`), else written from its `model.pt` and `tokenizer.json`, logged under its run
    and tagged on it. `ExportRefused` when its workload is not exported as `fmt`."""
    import mlflow

    from foundry.registry.versions import resolve
    from foundry.runtime import tracking

    writer(fmt)  # an unknown format, or a writer that cannot be imported, before anything else
    out_dir = Path(out_dir).absolute()
    check_out_dir(out_dir)
    version = resolve(model_uri)
    pinned = ModelUri.of(version)
    workload = workload_of(version)
    writer(fmt, workload, str(pinned))  # a format its workload does not write, before any download
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
            _write(version, workload, fmt, home, files)
            tracking.log_artifact(version.run_id, files, artifact)
            tracking.client().set_model_version_tag(pinned.name, pinned.version, tag.export(fmt), artifact)
        record = {"model_uri": str(pinned), "format": fmt, "format_version": FORMAT_VERSION, "artifact": artifact}
        record |= {"run_id": version.run_id, "files": _written(files)}
        (files / MARKER).write_text(json.dumps(record, indent=1) + "\n")
        _replace(files, out_dir)
    finally:
        remove_tree(scratch, within=out_dir.parent, ignore_errors=True)
    return Export(str(pinned), fmt, out_dir, artifact, version.run_id, reused)


def _replace(files: Path, out_dir: Path) -> None:
    """`out_dir` becomes `files` (same file system): an empty folder, or a previous export whose files alone are
    removed (the files its marker lists, then the folders they leave empty), is replaced."""
    check_out_dir(out_dir)  # again: the folder may have gained files while the export was written
    if out_dir.is_dir():
        _clear(out_dir, (_listed(out_dir) or frozenset()) | {MARKER})
    os.rename(files, out_dir)


def _clear(out_dir: Path, listed: frozenset[str]) -> None:
    """Removes the regular files of `out_dir` named in `listed`, then every folder left empty, then `out_dir`. A
    file that appeared since the check is kept, and stops the export (ExportRefused)."""
    entries = list(_entries(out_dir))
    for name, path in entries:
        if name in listed and path.is_file() and not path.is_symlink():
            path.unlink()
    for _, path in reversed(entries):  # the deepest first
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):  # not empty: what it holds is not the export's
                path.rmdir()
    try:
        out_dir.rmdir()
    except OSError:
        left = [name for name, _ in _entries(out_dir)]
        raise ExportRefused(
            f"--out {out_dir} gained files during the export: {', '.join(left[:10])}. They were kept; the previous "
            "export's files were removed and the new one was not placed: move them out and export again"
        ) from None
