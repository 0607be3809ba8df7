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
