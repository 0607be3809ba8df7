"""Reading documents out of source files, one at a time, whatever the format.

Plain text, markdown and code files hold one document each; `.jsonl` one per line (the field
`data.jsonl_text_field`); `.parquet` one per row (the column `data.parquet_text_column`). Any of them
may be gzip-compressed (`NAME.EXT.gz`). Nothing reads more than one document (or one parquet batch)
into memory, and a line or file too long to become a document is skipped without being read whole. A
compressed file that inflates past `data.max_inflated_bytes` or `data.max_inflation_ratio` is rejected
(`inflated_too_large`) as soon as it does, whatever it holds; a parquet file counts as compressed (its pages
are, and a dictionary page repeats one value for any number of rows): refused when its metadata declares more,
or once its decoded rows reach the cap, each row measured before it becomes a Python string.
Bad input is handed to `reject`, which counts it or raises, by `data.on_error`.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

from foundry.config import DataConfig
from foundry.data.limits import TooLarge, capped, inflation_limit

Reject = Callable[..., None]  # reject(where, reason, detail="")
# Errors a damaged file raises while being read: the OS, gzip (OSError, EOFError, zlib.error), pyarrow (ValueError).
READ_ERRORS = (OSError, EOFError, zlib.error, ValueError)
PARQUET_BATCH_ROWS = 64
PARQUET_BATCH_BYTES = 256 << 20  # most bytes a batch of rows may decode to
SNIFF_BYTES = 8192
MAX_RECORD_DEPTH = 64  # a chat or preference record is 4 deep


class BadInputError(RuntimeError):
    """A source file that cannot be used while `data.on_error` is `fail`."""


def base_name(name: str) -> str:
    """The name less a trailing `.gz`: what decides the format."""
    return name[:-3] if name.endswith(".gz") else name


def max_record_bytes(cfg: DataConfig) -> int:
    """Bytes beyond which a file or line cannot hold an acceptable document (UTF-8 takes at most 4 bytes
    a character, JSON escapes up to 12; with room for trailing spaces normalising removes)."""
    return 16 * cfg.max_chars + 65536


@contextmanager
def _open(path: str, name: str, cfg: DataConfig) -> Iterator[IO[bytes]]:
    """The file's bytes, inflated when gzip-compressed, and then only as far as the limits allow."""
    if not name.endswith(".gz"):
        with open(path, "rb") as fh:
            yield fh
        return
    limit, key = inflation_limit(cfg, os.path.getsize(path))
    too_large = f"inflates past {limit} bytes ({key})"
    # Inflated once to the end first: a file refused at the cap contributes nothing, not the documents before it.
    with gzip.open(path, "rb") as raw, capped(raw, limit, too_large) as fh:
        while fh.read(1 << 20):
            pass
    with gzip.open(path, "rb") as raw, capped(raw, limit, too_large) as fh:
        yield fh


def read_documents(path: str, name: str, cfg: DataConfig, reject: Reject) -> Iterator[tuple[str, str]]:
    """(text, where) for each document of one file; `where` names the file, line or row for reports."""
    kind = base_name(name)
    reader = _jsonl if kind.endswith(".jsonl") else _parquet if kind.endswith(".parquet") else _text
    yield from _guarded(reader, path, name, cfg, reject)


def _guarded(reader, path: str, name: str, cfg: DataConfig, reject: Reject) -> Iterator:
    """What `reader` yields from one file; a file that inflates too far or cannot be read goes to `reject`."""
    try:
        yield from reader(path, name, cfg, reject)
    except TooLarge as exc:
        reject(name, "inflated_too_large", str(exc))
    except READ_ERRORS as exc:
        reject(name, "unreadable", f"{type(exc).__name__}: {exc}")


def _text(path: str, name: str, cfg: DataConfig, reject: Reject) -> Iterator[tuple[str, str]]:
    limit = max_record_bytes(cfg)
    with _open(path, name, cfg) as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        reject(name, "too_long", f"more than {limit} bytes")
    elif not raw.strip():
        reject(name, "empty_file")
    elif b"\x00" in raw:
        reject(name, "binary")
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            reject(name, "invalid_utf8", str(exc))
            return
        yield text.removeprefix("\ufeff"), name


def _why(exc: Exception) -> str:
    """Why a line is not a record. Nesting deeper than the stack (`[[[[...`) is one bad record like any other:
    `json` raises `RecursionError`, which is no `ValueError`."""
    return "nested too deeply" if isinstance(exc, RecursionError) else repr(exc)


def bounded_lines(fh: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) with None for a line over `limit` bytes, whose rest is skipped unread."""
    lineno = 0
    while line := fh.readline(limit + 1):
        lineno += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield lineno, None
        else:
            yield lineno, line


def _jsonl(path: str, name: str, cfg: DataConfig, reject: Reject) -> Iterator[tuple[str, str]]:
    field, limit, seen = cfg.jsonl_text_field, max_record_bytes(cfg), False
    with _open(path, name, cfg) as fh:
        if b"\x00" in fh.peek(SNIFF_BYTES)[:SNIFF_BYTES]:  # JSON text never holds a NUL byte
            reject(name, "binary")
            return
        for lineno, line in bounded_lines(fh, limit):
            where = f"{name}:{lineno}"
            if line is None:
                seen = True
                reject(where, "oversized_record", f"line longer than {limit} bytes")
                continue
            if not line.strip():
                continue
            seen = True
            try:
                value = json.loads(line.decode("utf-8"))[field]
                if not isinstance(value, str):
                    raise TypeError(f"field {field!r} is not a string")
            except UnicodeDecodeError as exc:
                reject(where, "invalid_utf8", str(exc))
                continue
            except (ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
                reject(where, "malformed_jsonl", _why(exc))
                continue
            yield value, where
    if not seen:
        reject(name, "empty_file")


@contextmanager
def _seekable(path: str, name: str, cfg: DataConfig) -> Iterator[str]:
    """Parquet reads its footer first, so a gzip-compressed one is inflated to a temporary file (deleted
    however this ends, a refusal past the limits included)."""
    if not name.endswith(".gz"):
        yield path
        return
    with tempfile.NamedTemporaryFile(suffix=".parquet") as tmp:
        with _open(path, name, cfg) as src:
            shutil.copyfileobj(src, tmp, 1 << 20)
        tmp.flush()
        yield tmp.name


def _parquet(path: str, name: str, cfg: DataConfig, reject: Reject) -> Iterator[tuple[str, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    column = cfg.parquet_text_column
    with _seekable(path, name, cfg) as readable:
        parquet = pq.ParquetFile(readable)
        schema = parquet.schema_arrow
        if column not in schema.names:
            reject(name, "missing_text_column", f"no column {column!r}; columns: {schema.names}")
            return
        if not (pa.types.is_string(schema.field(column).type) or pa.types.is_large_string(schema.field(column).type)):
            reject(name, "missing_text_column", f"column {column!r} holds {schema.field(column).type}, not text")
            return
        if parquet.metadata.num_rows == 0:
            reject(name, "empty_file")
            return
        # Parquet compresses (and dictionary-encodes) on its own: the same cap as a .gz, on the source's bytes.
        limit, key = inflation_limit(cfg, os.path.getsize(path))
        too_large = f"inflates past {limit} bytes ({key})"
        chunks = _chunk_sizes(parquet.metadata, schema.get_field_index(column))
        if sum(chunks) > limit:  # what the file declares: refused before a page is read
            raise TooLarge(f"{too_large}: its column {column!r} declares {sum(chunks)} bytes")
        batch_rows = _batch_rows(max(chunks))
        _measure_parquet(parquet, column, batch_rows, (limit, too_large))
        yield from _parquet_rows(parquet, column, name, batch_rows, cfg, reject)


def _chunk_sizes(metadata, index: int) -> list[int]:
    """The uncompressed bytes the text column declares in each row group."""
    return [metadata.row_group(g).column(index).total_uncompressed_size for g in range(metadata.num_row_groups)]


def _batch_rows(chunk_bytes: int) -> int:
    """Rows decoded at a time: one value may be as large as its column chunk, and a dictionary page can give
    it to every row, so a batch of them stays within `PARQUET_BATCH_BYTES` (or one row)."""
    return max(1, min(PARQUET_BATCH_ROWS, PARQUET_BATCH_BYTES // max(chunk_bytes, 1)))


def _measure_parquet(parquet, column: str, batch_rows: int, cap: tuple[int, str]) -> None:
    """`TooLarge` once the text column's decoded bytes pass the cap, whatever its metadata said (a dictionary
    page declares a value once and repeats it per row). Measured to the end before a row is read, so a file
    refused contributes no rows; from the Arrow arrays' offsets, so no value is copied."""
    import pyarrow.compute as pc

    inflated = 0
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=[column]):
        inflated += pc.sum(pc.binary_length(batch.column(0))).as_py() or 0
        if inflated > cap[0]:
            raise TooLarge(cap[1])


def _parquet_rows(parquet, column: str, name: str, batch_rows: int, cfg, reject):
    """The rows, each measured from the Arrow array's offsets before it becomes a Python string: a row
    longer than any document is rejected unread."""
    import pyarrow.compute as pc

    row, longest = 0, max_record_bytes(cfg)
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=[column]):
        values = batch.column(0)
        lengths = pc.binary_length(values)  # from the offsets: no value is copied
        if values.null_count == 0 and (pc.max(lengths).as_py() or 0) <= longest:  # the usual batch
            for text in values.to_pylist():
                row += 1
                yield text, f"{name}#{row}"
            continue
        for i, size in enumerate(lengths.to_pylist()):
            row += 1
            where = f"{name}#{row}"
            if size is None:
                reject(where, "null_text")
            elif size > longest:
                reject(where, "oversized_record", f"a value of {size} bytes, more than {longest}")
            else:
                yield values[i].as_py(), where


# --- records: one JSON object a line, for data that is not plain text (alignment) ---------------------


def read_records(path: str, name: str, cfg: DataConfig, reject: Reject) -> Iterator[tuple[dict, str]]:
    """(object, where) for each JSON object of a `.jsonl` file; `where` is `file:line`. Lines that are not
    JSON objects, and files that are not `.jsonl`, go to `reject` with their reason."""
    if not base_name(name).endswith(".jsonl"):
        reject(name, "not_jsonl", "records are read from .jsonl files only")
        return
    yield from _guarded(_records, path, name, cfg, reject)


def _records(path: str, name: str, cfg: DataConfig, reject: Reject) -> Iterator[tuple[dict, str]]:
    seen, limit = False, max_record_bytes(cfg)
    with _open(path, name, cfg) as fh:
        if b"\x00" in fh.peek(SNIFF_BYTES)[:SNIFF_BYTES]:
            reject(name, "binary")
            return
        for lineno, line in bounded_lines(fh, limit):
            where = f"{name}:{lineno}"
            if line is not None and not line.strip():
                continue
            seen = True
            if line is None:
                reject(where, "oversized_record", f"line longer than {limit} bytes")
                continue
            try:
                value = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                reject(where, "invalid_utf8", str(exc))
                continue
            except (ValueError, RecursionError) as exc:
                reject(where, "malformed_jsonl", _why(exc))
                continue
            if not isinstance(value, dict):
                reject(where, "malformed_jsonl", f"a JSON {type(value).__name__}, not an object")
                continue
            opened = line.count(b"[") + line.count(b"{")  # at least as many as its depth: mostly, no walk at all
            if opened > MAX_RECORD_DEPTH and not _nested_within(value, MAX_RECORD_DEPTH):
                reject(where, "malformed_jsonl", f"nested deeper than {MAX_RECORD_DEPTH}")
                continue
            yield value, where
    if not seen:
        reject(name, "empty_file")


def _nested_within(value, depth: int) -> bool:
    """Whether no list or object lies more than `depth` deep: `json` parses up to about 1000 levels, and what
    walks a record recursively (scrubbing, checking its shape) would run out of stack on them."""
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if level > depth:
            return False
        children = item.values() if isinstance(item, dict) else item
        pending += [(child, level + 1) for child in children if isinstance(child, dict | list)]
    return True
