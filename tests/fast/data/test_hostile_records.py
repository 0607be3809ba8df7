"""#55 points 1 and 2: a parquet bomb and single hostile records, fed to the real `foundry acquire` and
`foundry prepare` (configs/tiny.yaml). A bomb is refused at the inflation cap naming the file and the cap,
before its rows become Python strings; a record that breaks its parser (nesting that exhausts the stack, a CSV
field past the csv module's limit, bytes that are not UTF-8, a line longer than any record) is one bad record
under `data.on_error`: skipped and counted, or the run stops naming the file and line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO_ROOT
from synthetic import synthetic_docs

from foundry.cli import main

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)

TINY = str(REPO_ROOT / "configs" / "tiny.yaml")
ROW = 256 << 10  # one bomb row: 256 KiB of one letter
NESTED = b'{"text": ' + b"[" * 200_000 + b"}\n"  # JSON nested past any stack


def corpus(root: Path, n: int = 30) -> Path:
    """`n` ordinary documents as text files: what a prepare needs beside the hostile file."""
    for i, text in enumerate(synthetic_docs(n, seed=5)):
        (root / f"doc{i:02d}.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / f"doc{i:02d}.txt").write_text(text)
    return root


def parquet_bomb(path: Path, rows: int = 64, dictionary: bool = False) -> Path:
    """`rows` rows of one 256 KiB value, zstd-compressed: a few KB on disk. Plain-encoded, the file declares
    its inflated size in its metadata; dictionary-encoded, it declares the value once and repeats it per row."""
    table = pa.table({"text": ["x" * ROW] * rows})
    pq.write_table(table, path, compression="zstd", use_dictionary=dictionary)
    return path


def stages(tmp_path: Path, source: Path | str, *sets: str, capsys=None) -> tuple[int, str, dict]:
    """`foundry acquire` then `foundry prepare` on `source`: (exit status, stderr, the dataset manifest or {})."""
    manifest, out = tmp_path / "source_manifest.json", tmp_path / "prepared"
    common = ["--config", TINY, "--set", f"data.source={source}", *[a for s in sets for a in ("--set", s)]]
    code = main(["acquire", *common, "--out", str(manifest)])
    if code == 0:
        code = main(["prepare", *common, "--manifest", str(manifest), "--out", str(out)])
    err = capsys.readouterr().err if capsys else ""
    done = json.loads((out / "manifest.json").read_text()) if code == 0 else {}
    return code, err, done


def dropped(done: dict, reason: str) -> int:
    """How many inputs the prepared dataset's manifest counts as dropped for `reason`."""
    return done["stats"].get(f"dropped_{reason}", 0)


# --- 1. the parquet bomb -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dictionary", [False, True], ids=["declared", "dictionary"])
def test_a_parquet_bomb_is_refused_at_the_cap_naming_file_and_cap(tmp_path, capsys, dictionary):
    src = corpus(tmp_path / "src")
    bomb = parquet_bomb(src / "bomb.parquet", dictionary=dictionary)
    assert bomb.stat().st_size < 64 << 10  # 16 MiB of rows in a few KB

    code, err, _ = stages(tmp_path, src, "data.on_error=fail", capsys=capsys)
    assert code == 1
    assert "bomb.parquet: inflated too large inflates past 1048576 bytes (data.max_inflation_ratio)" in err

    code, _, done = stages(tmp_path, src, capsys=capsys)  # skip: counted, the corpus prepared without it
    assert code == 0 and dropped(done, "inflated_too_large") == 1


def test_a_parquet_bomb_inside_a_zip_is_refused_the_same_way(tmp_path, capsys, http_folder):
    """The zip served over http, unpacked by acquire within the archive limits: its parquet member still bombs."""
    folder, url = http_folder
    bomb = parquet_bomb(tmp_path / "bomb.parquet")
    with zipfile.ZipFile(folder / "src.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for i, text in enumerate(synthetic_docs(30, seed=5)):
            zf.writestr(f"doc{i:02d}.txt", text)
        zf.write(bomb, "data/bomb.parquet")
    code, err, _ = stages(tmp_path, f"{url}/src.zip", "data.on_error=fail", capsys=capsys)
    assert code == 1 and "data/bomb.parquet: inflated too large inflates past 1048576 bytes" in err


def test_a_gzipped_parquet_bomb_is_held_to_the_gz_file_s_own_size(tmp_path, capsys):
    """The review's 973-byte `.parquet.gz`: the cap follows the bytes on disk, not the inflated parquet's."""
    import gzip

    src = corpus(tmp_path / "src")
    bomb = parquet_bomb(tmp_path / "bomb.parquet", dictionary=True)
    (src / "bomb.parquet.gz").write_bytes(gzip.compress(bomb.read_bytes()))
    code, err, _ = stages(tmp_path, src, "data.on_error=fail", capsys=capsys)
    assert code == 1 and "bomb.parquet.gz: inflated too large inflates past 1048576 bytes" in err


def test_the_cap_is_max_inflated_bytes_when_that_is_lower(tmp_path, capsys):
    src = corpus(tmp_path / "src")
    parquet_bomb(src / "bomb.parquet", rows=8)
    code, err, _ = stages(tmp_path, src, "data.on_error=fail", "data.max_inflated_bytes=500000", capsys=capsys)
    assert code == 1 and "bomb.parquet: inflated too large inflates past 500000 bytes (data.max_inflated_bytes)" in err


READ_BOMB = """
import json, sys, tracemalloc
import pyarrow as pa
from foundry.config import DataConfig
from foundry.data.formats import read_documents
rejects = []
tracemalloc.start()
docs = list(read_documents(sys.argv[1], "bomb.parquet", DataConfig(), lambda *a: rejects.append(a)))
print(json.dumps({"docs": len(docs), "rejects": [r[:2] for r in rejects],
                  "python_peak": tracemalloc.get_traced_memory()[1], "arrow_peak": pa.default_memory_pool().max_memory()}))
"""


def test_a_dictionary_bomb_is_never_held_whole(tmp_path):
    """640 rows of one 256 KiB value (160 MiB decoded): refused after one batch, no row made a Python string.
    A process of its own, so that Arrow's peak is this read's."""
    bomb = parquet_bomb(tmp_path / "bomb.parquet", rows=640, dictionary=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", READ_BOMB, str(bomb)], env=env, capture_output=True, text=True)
    result = json.loads(done.stdout)
    assert result["docs"] == 0 and result["rejects"] == [["bomb.parquet", "inflated_too_large"]]
    assert result["python_peak"] < 4 << 20, result
    assert result["arrow_peak"] < 40 << 20, result  # one batch of 64 rows, not 160 MiB


def test_an_oversized_parquet_row_is_rejected_before_it_is_a_string(tmp_path, capsys):
    """One row longer than any document (16 x max_chars bytes) in an ordinary file: that row alone is rejected."""
    src = corpus(tmp_path / "src")
    rows = [*synthetic_docs(3, seed=9), "y " * 100_000]
    pq.write_table(pa.table({"text": rows}), src / "rows.parquet")
    code, err, _ = stages(tmp_path, src, "data.on_error=fail", "data.max_chars=4000", capsys=capsys)
    assert code == 1 and "rows.parquet#4: oversized record a value of 200000 bytes" in err
    code, _, done = stages(tmp_path, src, "data.max_chars=4000", capsys=capsys)
    assert code == 0 and dropped(done, "oversized_record") == 1


# --- 2. one hostile record ---------------------------------------------------------------------------------------


def test_a_jsonl_line_nested_past_the_stack_is_one_bad_record(tmp_path, capsys):
    src = corpus(tmp_path / "src")
    good = json.dumps({"text": synthetic_docs(1, seed=11)[0]}).encode() + b"\n"
    (src / "records.jsonl").write_bytes(good + NESTED + good.replace(b"the end", b"and the end"))

    code, err, _ = stages(tmp_path, src, "data.on_error=fail", capsys=capsys)
    assert code == 1 and "records.jsonl:2: malformed jsonl nested too deeply" in err

    code, _, done = stages(tmp_path, src, capsys=capsys)
    assert code == 0 and dropped(done, "malformed_jsonl") == 1
    assert done["stats"]["docs_in"] == 32  # the 30 files and the two good records around the bad one


def image_index(tmp_path: Path, kind: str, bad: bytes) -> Path:
    """An index of three labelled PNGs, the second line `bad`."""
    from PIL import Image

    folder = tmp_path / "src"
    (folder / "pics").mkdir(parents=True)
    rows = []
    for n in range(3):
        Image.new("RGB", (16, 16), (80 * n, 40, 200 - 60 * n)).save(folder / "pics" / f"{n}.png")
        rows.append(
            f"pics/{n}.png,class{n % 2}\n"
            if kind == "csv"
            else json.dumps({"path": f"pics/{n}.png", "label": f"class{n % 2}"}) + "\n"
        )
    head = b"path,label\n" if kind == "csv" else b""
    index = folder / f"labels.{kind}"
    index.write_bytes(head + rows[0].encode() + bad + rows[1].encode() + rows[2].encode())
    return index


BAD_INDEX_LINES = {
    "csv_field_past_csv_limit": ("csv", b'"pics/' + b"a" * 200_000 + b'.png",x\n', "a line longer than 65536 bytes"),
    "csv_quoted_field_over_lines": ("csv", b'"pics/' + b"a\n" * 70_000 + b'.png",x\n', "needs string path"),
    "csv_not_utf8": ("csv", "pics/caf\xe9.png,x\n".encode("latin-1"), "not UTF-8"),
    "jsonl_nested": ("jsonl", b'{"path": ' + b"[" * 50_000 + b"}\n", "nested too deeply"),
    "jsonl_not_utf8": ("jsonl", b'{"path": "caf\xe9.png", "label": "x"}\n', "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_INDEX_LINES))
def test_a_hostile_image_index_line_is_one_bad_row(tmp_path, capsys, case):
    kind, bad, why = BAD_INDEX_LINES[case]
    index = image_index(tmp_path, kind, bad)
    line = 3 if kind == "csv" else 2
    sets = ["data.modality=image", "data.on_error=fail"]
    code, err, _ = stages(tmp_path, index, *sets, capsys=capsys)
    assert code == 1 and f"labels.{kind}:{line}: malformed index row ({why}" in err, err

    manifest = tmp_path / "source_manifest.json"
    common = ["--config", TINY, "--set", f"data.source={index}", "--set", "data.modality=image"]
    assert main(["acquire", *common, "--out", str(manifest)]) == 0
    listed = json.loads(manifest.read_text())
    assert listed["files"] == 3 and listed["skipped"]["malformed_index_row"] >= 1


def test_an_enormous_index_line_is_never_read_whole(tmp_path):
    """A 64 MiB line in an image index (the review's took 470 MB for 200 MB): skipped as it streams past."""
    import tracemalloc

    index = image_index(tmp_path, "jsonl", b"")
    with open(index, "ab") as fh:
        fh.write(b'{"path": "')
        for _ in range(64):
            fh.write(b"p" * (1 << 20))
        fh.write(b'", "label": "x"}\n')
    manifest = tmp_path / "source_manifest.json"
    tracemalloc.start()
    code = main(["acquire", "--config", TINY, "--set", f"data.source={index}", "--set", "data.modality=image",
                 "--out", str(manifest)])  # fmt: skip
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert code == 0 and json.loads(manifest.read_text())["skipped"] == {"malformed_index_row": 1}
    assert peak < 8 << 20, f"peak {peak} bytes"


def test_a_failed_prepare_leaves_its_log_with_the_traceback(tmp_path, capsys):
    """A real `foundry prepare` process (only one sets up the log file) stopped by a bad record under
    on_error: fail: its log under $FOUNDRY_HOME/logs/ opens with the command and ends with the error."""
    src = corpus(tmp_path / "src")
    (src / "records.jsonl").write_bytes(b"{not json\n")
    common = ["--config", TINY, "--set", f"data.source={src}", "--set", "data.on_error=fail"]
    assert main(["acquire", *common, "--out", str(tmp_path / "m.json")]) == 0
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_HOME", "PREFECT_API_URL"):  # the test's home, not the session's
        env.pop(name, None)
    command = ["prepare", *common, "--manifest", str(tmp_path / "m.json"), "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "foundry.cli", *command], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1 and "records.jsonl:1: malformed jsonl" in done.stderr
    (log,) = (Path(os.environ["FOUNDRY_HOME"]) / "logs").glob("prepare-*.log")
    text = log.read_text()
    assert "foundry prepare started" in text.splitlines()[0]
    assert "Traceback" in text and "BadInputError: records.jsonl:1: malformed jsonl" in text


# --- 9. a file refused at the cap contributes nothing ------------------------------------------------------------


def kept_docs(done: dict) -> int:
    return sum(v for k, v in done["stats"].items() if k.endswith("_docs") and not k.startswith("dropped"))


def test_a_jsonl_gz_refused_at_the_cap_contributes_none_of_its_documents(tmp_path, capsys):
    """Its first 20 lines are ordinary documents; then lines of one letter inflate it past the cap."""
    import gzip

    src = corpus(tmp_path / "src")
    _, _, clean = stages(tmp_path / "clean", src, capsys=capsys)
    lines = [json.dumps({"text": text}) for text in synthetic_docs(20, seed=9)]
    lines += [json.dumps({"text": "y" * 60_000})] * 40  # 2.4 MB of text, past the 1 MiB cap (100x a few KB)
    (src / "mixed.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode()))

    code, _, done = stages(tmp_path / "run", src, capsys=capsys)
    assert code == 0 and dropped(done, "inflated_too_large") == 1
    assert kept_docs(done) == kept_docs(clean) > 0  # none of its 20 documents got in


def test_a_parquet_whose_dictionary_hides_the_bomb_contributes_none_of_its_rows(tmp_path, capsys):
    """A row group of ordinary rows, then one whose dictionary page declares its one value once."""
    src = corpus(tmp_path / "src")
    _, _, clean = stages(tmp_path / "clean", src, capsys=capsys)
    with pq.ParquetWriter(src / "mixed.parquet", pa.schema([("text", pa.string())]), compression="zstd") as out:
        out.write_table(pa.table({"text": list(synthetic_docs(80, seed=9))}))  # past one batch of 64
        out.write_table(pa.table({"text": ["x" * ROW] * 64}))  # declares 256 KiB, decodes to 16 MiB

    code, _, done = stages(tmp_path / "run", src, capsys=capsys)
    assert code == 0 and dropped(done, "inflated_too_large") == 1
    assert kept_docs(done) == kept_docs(clean) > 0


# --- 9. a URL that names no file, or a name no disk takes ---------------------------------------------------------


def parts_left() -> list[Path]:
    return list(Path(os.environ["FOUNDRY_HOME"]).rglob("*.part"))


def test_a_url_ending_in_dot_dot_is_mirrored_as_an_index(tmp_path, capsys, http_folder):
    folder, base = http_folder
    corpus(folder / "sub")
    manifest = tmp_path / "source_manifest.json"
    code = main(["acquire", "--config", TINY, "--set", f"data.source={base}/sub/..", "--out", str(manifest)])
    assert code == 0, capsys.readouterr().err
    assert [entry["name"] for entry in json.loads(manifest.read_text())["entries"]] == ["index.txt"]
    assert parts_left() == []


def test_a_file_name_too_long_for_the_disk_is_a_clear_error(tmp_path, capsys, http_folder):
    folder, base = http_folder
    name = "d" * 300 + ".txt"  # past the 255 bytes a file name may have
    manifest = tmp_path / "source_manifest.json"
    code = main(["acquire", "--config", TINY, "--set", f"data.source={base}/{name}", "--out", str(manifest)])
    err = capsys.readouterr().err
    assert code == 1 and f"cannot download {base}/{name}: its file name is longer than the 255 bytes" in err
    assert "Traceback" not in err and parts_left() == []


def test_a_failed_acquire_leaves_its_log_with_the_traceback(tmp_path):
    """`foundry acquire` too (its log stayed empty at 80850a5): a source that does not exist stops it, and its log
    under $FOUNDRY_HOME/logs/ opens with the command and ends with the error the console named."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FOUNDRY_HOME": str(tmp_path / "home")}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_HOME", "PREFECT_API_URL"):  # the test's home, not the session's
        env.pop(name, None)
    missing = tmp_path / "nowhere"
    command = ["acquire", "--config", TINY, "--set", f"data.source={missing}", "--out", str(tmp_path / "m.json")]
    done = subprocess.run(
        [sys.executable, "-m", "foundry.cli", *command], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1 and "does not exist" in done.stderr
    (log,) = (tmp_path / "home" / "logs").glob("acquire-*.log")
    text = log.read_text()
    assert "foundry acquire started" in text.splitlines()[0]
    assert "Traceback" in text and f"SourceError: data.source '{missing}' does not exist" in text
