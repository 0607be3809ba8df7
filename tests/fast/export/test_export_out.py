"""`foundry export --out DIR` over a previous export: only the files its marker lists are replaced; a folder
holding anything else (a user's own files added beside the export) is refused, every file named, nothing deleted
(issue #55, point 3). Through the CLI against the session's embedded MLflow."""

from __future__ import annotations

import json

import pytest
import torch
from helpers_export import corpus_tokenizer, sharp_gpt
from helpers_registry import new_run

from foundry.cli import main
from foundry.export.publish import MARKER, ExportRefused


@pytest.fixture
def registered(tmp_path):
    """A tiny version registered in the session's MLflow as Foundry registers one: a logged pyfunc model."""
    from foundry.registry.versions import register
    from foundry.serving.package import log_model

    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json")
    model = sharp_gpt(tokenizer.get_vocab_size(), "rotary")
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, tmp_path / "model.pt")
    run_id = new_run("export-out")
    uri = log_model(run_id, tmp_path / "model.pt", tmp_path / "tokenizer.json")
    name = f"export-out-{tmp_path.name}"
    return f"models:/{name}/{register(uri, name, run_id, {})}"


def export(registered: str, out, fmt: str = "hf") -> int:
    return main(["export", registered, "--format", fmt, "--out", str(out)])


def tree(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_users_files_beside_a_previous_export_survive_it(tmp_path, registered, capsys):
    out = tmp_path / "out"
    assert export(registered, out) == 0
    (out / "train.py").write_text("print('mine')\n")
    (out / "sub").mkdir()
    (out / "sub" / "data.txt").write_text("my data\n")
    before = tree(out)
    code = export(registered, out)
    assert code != 0
    message = capsys.readouterr().err
    assert "train.py" in message and "sub/data.txt" in message and "nothing was changed" in message
    assert tree(out) == before  # the user's files and the previous export, byte for byte


def test_a_previous_export_alone_is_replaced_and_its_marker_lists_every_file(tmp_path, registered):
    out = tmp_path / "out"
    assert export(registered, out) == 0
    listed = json.loads((out / MARKER).read_text())["files"]
    assert sorted(listed) == sorted(set(tree(out)) - {MARKER})
    assert export(registered, out, "gguf") == 0  # the hf files go, the gguf file comes
    assert set(tree(out)) == {"model.gguf", MARKER}


def test_an_older_marker_that_lists_no_files_is_refused(tmp_path, registered, capsys):
    out = tmp_path / "out"
    assert export(registered, out) == 0
    record = json.loads((out / MARKER).read_text())
    del record["files"]
    (out / MARKER).write_text(json.dumps(record))
    before = tree(out)
    assert export(registered, out) != 0
    assert "lists no files" in capsys.readouterr().err
    assert tree(out) == before


def test_a_marker_cannot_reach_outside_its_folder(tmp_path, registered):
    """A marker naming files outside --out, or a link inside it, deletes nothing outside: the link is refused."""
    from foundry.export.publish import check_out_dir

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    assert export(registered, out) == 0
    record = json.loads((out / MARKER).read_text())
    record["files"] += ["../elsewhere/keep.txt", "link/keep.txt", "link"]
    (out / MARKER).write_text(json.dumps(record))
    (out / "link").symlink_to(elsewhere)
    with pytest.raises(ExportRefused, match="link"):
        check_out_dir(out)
    assert export(registered, out) != 0
    assert (elsewhere / "keep.txt").read_text() == "keep" and (out / "link").is_symlink()


def test_a_file_added_while_the_export_is_written_is_kept(tmp_path, registered):
    """The removal itself takes only listed files: one that appears after the check survives and stops it."""
    from foundry.export.publish import _clear, _listed

    out = tmp_path / "out"
    assert export(registered, out) == 0
    listed = _listed(out) | {MARKER}
    (out / "late.txt").write_text("mine")
    with pytest.raises(ExportRefused, match="late.txt"):
        _clear(out, listed)
    assert tree(out) == {"late.txt": b"mine"}
