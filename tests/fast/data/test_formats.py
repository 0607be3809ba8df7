"""foundry.data.formats: every format, gzip-compressed or not, and every kind of bad input, skipped or fatal."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from foundry.config import DataConfig
from foundry.core.contracts import SourceFile
from foundry.data.formats import max_record_bytes, read_documents
from foundry.pretrain.clean import BadInputError, clean_documents, iter_texts

CFG = DataConfig(min_chars=20, max_chars=1000)
TEXT = "a plain document with enough words in it\n"


def read(path: Path, cfg: DataConfig = CFG) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(documents, rejects) of one file, rejects as (where, reason)."""
    rejects: list[tuple[str, str]] = []
    docs = list(
        read_documents(str(path), path.name, cfg, lambda where, reason, detail="": rejects.append((where, reason)))
    )
    return docs, rejects


def write_parquet(path: Path, table: pa.Table, gz: bool = False) -> Path:
    pq.write_table(table, path)
    if gz:
        data = path.read_bytes()
        path.unlink()
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    return path


# --- formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["doc.txt", "doc.md", "doc.py", "doc.txt.gz", "doc.py.gz"])
def test_text_files_are_one_document(tmp_path, name):
    path = tmp_path / name
    data = TEXT.encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert read(path) == ([(TEXT, name)], [])


def test_byte_order_mark_is_dropped(tmp_path):
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + TEXT.encode())
    assert read(tmp_path / "bom.txt")[0] == [(TEXT, "bom.txt")]


@pytest.mark.parametrize("gz", [False, True])
def test_jsonl_records_with_a_configurable_field(tmp_path, gz):
    lines = [json.dumps({"body": f"record {i}", "text": "other"}) for i in range(3)]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / ("r.jsonl.gz" if gz else "r.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    docs, rejects = read(path, DataConfig(jsonl_text_field="body"))
    assert docs == [(f"record {i}", f"{path.name}:{i + 1}") for i in range(3)] and rejects == []


@pytest.mark.parametrize("gz", [False, True])
def test_parquet_rows_with_a_configurable_column(tmp_path, gz):
    table = pa.table({"id": list(range(150)), "content": [f"row {i}" for i in range(150)]})
    path = write_parquet(tmp_path / "t.parquet", table, gz)
    docs, rejects = read(path, DataConfig(parquet_text_column="content"))
    assert rejects == [] and len(docs) == 150  # more rows than one read batch
    assert docs[0] == ("row 0", f"{path.name}#1") and docs[-1] == ("row 149", f"{path.name}#150")


# --- bad input -------------------------------------------------------------------------------


def bad_inputs(root: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (expected reasons); each file is bad in one way, some hold good records too."""
    root.mkdir(exist_ok=True)
    (root / "empty.txt").write_bytes(b"")
    (root / "blank.md").write_bytes(b" \n\t\n")
    (root / "binary.txt").write_bytes(b"PK\x03\x04\x00\x00binary" * 10)
    (root / "latin1.txt").write_bytes("caf\u00e9 ".encode("latin-1") * 20)
    limit = max_record_bytes(CFG)
    (root / "one_line.txt").write_bytes(b"x" * (limit + 10))
    (root / "empty.jsonl").write_bytes(b"\n\n")
    (root / "binary.jsonl").write_bytes(b'{"text": "a"}\n\x00\x01\x02\n')
    good = json.dumps({"text": TEXT})
    lines = [
        good,
        "{not json",
        json.dumps({"body": "no text field"}),
        json.dumps({"text": 42}),
        "[1, 2]",
        '{"text": "caf\xe9"}',
        '{"text": "' + "y" * (limit + 5) + '"}',
        good.replace("plain", "second"),
    ]
    (root / "mixed.jsonl").write_bytes(b"\n".join(line.encode("latin-1") for line in lines) + b"\n")
    (root / "truncated.txt.gz").write_bytes(gzip.compress(TEXT.encode() * 50)[:-30])
    (root / "garbage.txt.gz").write_bytes(b"not gzip at all")
    (root / "corrupt.parquet").write_bytes(b"PAR1 definitely not parquet PAR1")
    write_parquet(root / "no_column.parquet", pa.table({"body": [TEXT]}))
    write_parquet(root / "ints.parquet", pa.table({"text": [1, 2]}))
    write_parquet(root / "nulls.parquet", pa.table({"text": [TEXT, None, TEXT.upper()]}))
    write_parquet(root / "no_rows.parquet", pa.table({"text": pa.array([], pa.string())}))
    return {
        "empty.txt": ["empty_file"],
        "blank.md": ["empty_file"],
        "binary.txt": ["binary"],
        "latin1.txt": ["invalid_utf8"],
        "one_line.txt": ["too_long"],
        "empty.jsonl": ["empty_file"],
        "binary.jsonl": ["binary"],
        "mixed.jsonl": [
            "malformed_jsonl",
            "malformed_jsonl",
            "malformed_jsonl",
            "malformed_jsonl",
            "invalid_utf8",
            "oversized_record",
        ],
        "truncated.txt.gz": ["unreadable"],
        "garbage.txt.gz": ["unreadable"],
        "corrupt.parquet": ["unreadable"],
        "no_column.parquet": ["missing_text_column"],
        "ints.parquet": ["missing_text_column"],
        "nulls.parquet": ["null_text"],
        "no_rows.parquet": ["empty_file"],
    }


def test_each_bad_input_is_skipped_with_its_reason(tmp_path):
    expected = bad_inputs(tmp_path / "src")
    for name, reasons in expected.items():
        docs, rejects = read(tmp_path / "src" / name)
        assert [reason for _, reason in rejects] == reasons, name
        if name == "mixed.jsonl":
            assert [d for d, _ in docs] == [TEXT, TEXT.replace("plain", "second")]
            assert [where for where, _ in rejects] == [f"mixed.jsonl:{i}" for i in range(2, 8)]
        elif name == "nulls.parquet":
            assert [d for d, _ in docs] == [TEXT, TEXT.upper()] and rejects == [("nulls.parquet#2", "null_text")]
        else:
            assert docs == [], name


def test_bad_input_is_counted_through_clean(tmp_path):
    expected = bad_inputs(tmp_path / "src")
    before = {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir()}
    entries = [SourceFile(path=str(tmp_path / "src" / n), name=n, size=0, sha256="") for n in sorted(expected)]
    stats = clean_documents(entries, CFG, tmp_path / "out", progress=False)
    counts: dict[str, int] = {}
    for reasons in expected.values():
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
    dropped = dict(stats.dropped)
    assert dropped.pop("exact_duplicate") == 1  # nulls.parquet repeats mixed.jsonl's first record
    assert dropped == counts
    texts = [*iter_texts(tmp_path / "out" / "train.jsonl"), *iter_texts(tmp_path / "out" / "holdout.jsonl")]
    assert sorted(texts) == sorted([TEXT, TEXT.replace("plain", "second"), TEXT.upper()])
    assert {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir()} == before  # the source is never modified


@pytest.mark.parametrize(
    "name, message",
    [
        ("empty.txt", "empty.txt: empty file"),
        ("binary.txt", "binary.txt: binary"),
        ("latin1.txt", "latin1.txt: invalid utf8"),
        ("one_line.txt", "one_line.txt: too long"),
        ("mixed.jsonl", "mixed.jsonl:2: malformed jsonl"),
        ("truncated.txt.gz", "truncated.txt.gz: unreadable"),
        ("corrupt.parquet", "corrupt.parquet: unreadable"),
        ("no_column.parquet", "no_column.parquet: missing text column"),
        ("nulls.parquet", "nulls.parquet#2: null text"),
    ],
)
def test_fail_stops_at_the_first_bad_input_naming_it(tmp_path, name, message):
    bad_inputs(tmp_path / "src")
    with pytest.raises(BadInputError) as info:
        clean_documents(
            [SourceFile(path=str(tmp_path / "src" / name), name=name, size=0, sha256="")],
            DataConfig(**{**CFG.model_dump(), "on_error": "fail"}),
            tmp_path / "out",
            progress=False,
        )
    assert str(info.value).startswith(message) and "data.on_error=skip" in str(info.value)


def test_file_that_vanished_after_acquire_is_unreadable(tmp_path):
    entries = [SourceFile(path=str(tmp_path / "gone.txt"), name="gone.txt", size=0, sha256="")]
    assert clean_documents(entries, CFG, tmp_path / "out", progress=False).dropped == {"unreadable": 1}


@pytest.mark.parametrize("name", ["huge.txt", "huge.jsonl"])
def test_an_enormous_line_is_never_read_whole(tmp_path, name):
    size = 40 << 20
    with open(tmp_path / name, "wb") as fh:
        if name.endswith(".jsonl"):
            fh.write(b'{"text": "')
        for _ in range(size >> 20):
            fh.write(b"z" * (1 << 20))
        fh.write(b'"}\n' + json.dumps({"text": TEXT}).encode() + b"\n" if name.endswith(".jsonl") else b"\n")
    tracemalloc.start()
    docs, rejects = read(tmp_path / name)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 6 << 20, f"peak {peak} bytes reading a {size}-byte line"
    if name.endswith(".jsonl"):
        assert rejects == [(f"{name}:1", "oversized_record")] and docs == [(TEXT, f"{name}:2")]
    else:
        assert rejects == [(name, "too_long")] and docs == []
