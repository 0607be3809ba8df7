"""General compressors given the training text, scored on the holdout: the baselines a language model should beat.

Each scores the holdout's bits per byte *after* it has seen the tail of the training split, so it learns from the
same data as the model. gzip -9 and xz -6 (preset 6) see `evaluation.compression_context_bytes` of it, as they always
have; xz -9e, PPMd order 16 and the zpaq levels `evaluation.baselines` asks for, the strongest general compressors at
hand, see `evaluation.strong_context_bytes` (16 MiB: the whole default training split, 10.0 MiB) and the amount is
recorded as `baseline_train_bytes`.

How each is measured (bench/README.md has the figures on `make run`'s data):
- gzip, xz -6 and xz -9e: (size of train + holdout compressed) - (size of train compressed), in bits over the
  holdout's bytes. liblzma buffers its output, so no cheaper incremental reading exists for xz.
- PPMd: one encoder fed the training text, then the holdout; the holdout's share is the bytes the encoder emits from
  then on. Half the work of the difference, and within a few bytes of it (1.3364 against 1.3363 by difference on
  the default data: the range coder's pending bytes).
- zpaq -m4 and -m5 (`evaluation.baselines`: zpaq4, zpaq5), context mixing: by difference too, through the `zpaq`
  package (a binding of libzpaq 7.15), on one thread and in one block (threads, or a block smaller than the text,
  would cut it into blocks that each start empty). Both compressions use the model zpaq's CLI picks for a text
  block, named outright (`zpaq_method`), so the training text and the training text with the holdout are compressed
  by one model. Without the package the asked ones are absent (`absent_baselines`), never a score.

The compressions run on threads: liblzma, zlib and libzpaq release the GIL, so on 2 cores the added strong
baselines cost about their own time rather than the sum of all.
"""

from __future__ import annotations

import gzip
import lzma
import os
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from foundry.pretrain.clean import iter_texts

PPMD_ORDER = 16
# Measured on the default data: order 16 over the whole 10.0 MiB training split touches about 205 MiB of model, and
# 256 MiB scores the same as 1 GiB (1.3364); past about 12 MiB of text the model is full and PPMd8 cuts off its
# oldest contexts (rather than restarting empty), so a larger corpus still gets a sound, slightly weaker baseline.
PPMD_MEMORY = 256 << 20
XZ9E = 9 | lzma.PRESET_EXTREME
GROUP_COMPRESSORS = ("gzip", "ppmd")  # the ones `baselines_by_holdout` scores on each holdout apart
ZPAQ_LEVELS = {"zpaq4": 4, "zpaq5": 5}  # the optional baselines `evaluation.baselines` names, by zpaq -m level


def zpaq_method(level: int, size: int = 0) -> str:
    """libzpaq's method for `size` bytes of text at `level`, "LB,128,1": level L; blocks of 2^B MiB less 4 KiB, B
    at least 6 (the CLI's 64 MiB) and enough for `size` in one block (libzpaq reads B up to 11); order-1 redundancy
    128 of 255 (levels 4 and 5 read it only to choose CM over LZ77 or BWT: 12 to 224 give the same); type 1, text
    (the word model). zpaq's CLI and the binding's `hints` choose the same for a text block (the same bytes on a
    1 MiB slice of the default data and on the tests' text); naming it keeps one model for both compressions of
    the difference."""
    block = min(11, max(6, (size + 4095).bit_length() - 20))
    return f"{level}{block},128,1"


def absent_baselines(asked: Sequence[str]) -> list[str]:
    """The optional baselines in `asked` that cannot be scored here: zpaq's where the `zpaq` package is not
    installed, does not load (its extension built for a newer glibc, say), or was built for instructions this
    CPU lacks."""
    if not lacks_avx2():
        try:
            import zpaq  # noqa: F401
        except ImportError:
            pass
        else:
            return []
    return [name for name in asked if name in ZPAQ_LEVELS]


def lacks_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this x86 CPU has no AVX2: the zpaq wheel is built for it, and its code would end the process with
    an illegal instruction rather than raise. Where the CPU cannot be read (not Linux), the import decides."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    return flags is not None and "avx2" not in flags


def holdout_text(data_dir: Path) -> bytes:
    """The holdout's documents as the UTF-8 bytes bits per byte divide by."""
    return "".join(iter_texts(data_dir / "holdout.jsonl")).encode()


def train_tail(data_dir: Path, size: int) -> bytes:
    """The last `size` bytes of the training text (all of it when shorter), read without holding more."""
    if not size:
        return b""
    chunks: deque[bytes] = deque()
    total = 0
    for text in iter_texts(data_dir / "train.jsonl"):
        chunks.append(text.encode())
        total += len(chunks[-1])
        while total - len(chunks[0]) >= size:
            total -= len(chunks.popleft())
    return b"".join(chunks)[-size:]


def ppmd_bits(context: bytes, holdout: bytes, order: int = PPMD_ORDER, memory: int = PPMD_MEMORY) -> float:
    """PPMd variant I (pyppmd's default) at `order`, fed the context then the holdout; the holdout's bits per byte."""
    import pyppmd

    encoder = pyppmd.Ppmd8Encoder(order, memory, restore_method=pyppmd.PPMD8_RESTORE_METHOD_CUT_OFF)
    encoder.encode(context)
    return 8 * (len(encoder.encode(holdout)) + len(encoder.flush())) / len(holdout)


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def _size(squeeze: Callable[[bytes], bytes], data: bytes) -> int:
    return len(squeeze(data))


def _xz(preset: int) -> Callable[[bytes], bytes]:
    return lambda data: lzma.compress(data, preset=preset)


def _zpaq(level: int, size: int) -> Callable[[bytes], bytes]:
    """zpaq at `level` on one thread, in blocks that hold `size` bytes (the longer text of the difference)."""
    import zpaq

    return lambda data: zpaq.compress(data, level=level, threads=1, method=zpaq_method(level, size))


def compression_bits_per_byte(data_dir: Path, context_bytes: int) -> dict[str, float]:
    """gzip -9 and xz -6 alone, after `context_bytes` of the training text (bench/defaults.py's xz figure)."""
    context, holdout = train_tail(data_dir, context_bytes), holdout_text(data_dir)
    return {
        f"{name}_bits_per_byte": 8 * (_size(squeeze, context + holdout) - _size(squeeze, context)) / len(holdout)
        for name, squeeze in (("gzip", _gzip), ("xz", _xz(6)))
    }


def contexts(data_dir: Path, context_bytes: int, strong_context_bytes: int) -> tuple[bytes, bytes]:
    """The training text's last `context_bytes` and last `strong_context_bytes`, read once."""
    tail = train_tail(data_dir, max(context_bytes, strong_context_bytes))
    context, strong = (tail[len(tail) - min(size, len(tail)) :] for size in (context_bytes, strong_context_bytes))
    return context, strong


def compression_baselines(
    data_dir: Path, context_bytes: int, strong_context_bytes: int, optional: Sequence[str] = ()
) -> dict[str, float]:
    """gzip and xz -6 after `context_bytes` of the training text's tail; xz -9e, PPMd order 16 and the `optional`
    baselines (`ZPAQ_LEVELS` names) after `strong_context_bytes` of it; by `HoldoutMetrics` field name, with
    `baseline_train_bytes` (the latter amount). An optional one in `absent_baselines` is left out."""
    holdout = holdout_text(data_dir)
    context, strong = contexts(data_dir, context_bytes, strong_context_bytes)
    squeezers = {"xz9e": (_xz(XZ9E), strong), "xz": (_xz(6), context), "gzip": (_gzip, context)}
    missing = absent_baselines(optional)
    scored = [name for name in optional if name not in missing]
    zpaqs = {name: (_zpaq(ZPAQ_LEVELS[name], len(strong) + len(holdout)), strong) for name in scored}
    squeezers = zpaqs | squeezers  # the slowest first
    # One compression per job, the longest first, so that two cores share them evenly.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        ppmd = pool.submit(ppmd_bits, strong, holdout)
        sizes = {
            (name, part): pool.submit(_size, squeeze, data)
            for name, (squeeze, text) in squeezers.items()
            for part, data in (("both", text + holdout), ("train", text))
        }
        scores = {
            f"{name}_bits_per_byte": 8 * (sizes[name, "both"].result() - sizes[name, "train"].result()) / len(holdout)
            for name in squeezers
        }
        scores["ppmd_bits_per_byte"] = ppmd.result()
    return {**scores, "baseline_train_bytes": len(strong)}


def baselines_by_holdout(
    data_dir: Path, holdouts: dict[str, bytes], context_bytes: int, strong_context_bytes: int
) -> dict[str, dict[str, float]]:
    """gzip and PPMd on each of `holdouts` apart (a group's holdout text each, none empty), given the same training
    text as `compression_baselines` gives them: by holdout, then by `GROUP_COMPRESSORS` name.

    Each holdout costs a compression of the whole context again (neither liblzma nor pyppmd can copy a state), so
    only the cheapest and the strongest are scored per holdout: on the default data, per group of source files,
    gzip 0.9, PPMd 2.7, xz -6 5.1 and xz -9e 6.4 CPU seconds. The PPMd runs follow one another on one thread, so one
    `PPMD_MEMORY` model is held at a time, as `compression_baselines` holds one; gzip runs beside them."""
    context, strong = contexts(data_dir, context_bytes, strong_context_bytes)
    with ThreadPoolExecutor(max_workers=1) as pool:
        ppmd = pool.submit(lambda: {key: ppmd_bits(strong, text) for key, text in holdouts.items()})
        train = _size(_gzip, context)
        gzipped = {key: 8 * (_size(_gzip, context + text) - train) / len(text) for key, text in holdouts.items()}
        return {key: {"gzip": gzipped[key], "ppmd": bits} for key, bits in ppmd.result().items()}
