"""foundry.vision (data side): listing both layouts, decoding, metadata stripping, duplicates, the sticky split,
and the builtin digits; every image is made by Pillow in tmp_path."""

from __future__ import annotations

import io
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from helpers_forking import exit_code_at_sigterm
from PIL import Image, ImageCms

from foundry.config import DataConfig
from foundry.data.remote import SourceError
from foundry.vision import builtin, readpool
from foundry.vision.acquire import listing
from foundry.vision.config import ImageConfig
from foundry.vision.neardup import dhash, from_words, hash_words, words_of
from foundry.vision.prepare import StagedImages, prepare_images
from foundry.vision.readpool import _install, _Reader
from foundry.vision.table import ImageAudit, read_table

pytestmark = pytest.mark.usefixtures("home")
FORMATS = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP", "bmp": "BMP"}


def picture(seed: int, size: int = 64, mode: str = "RGB") -> Image.Image:
    """A smooth random picture: a 5x5 field of colours, enlarged (unlike noise, it survives recompression)."""
    field = (np.random.default_rng(seed).random((5, 5, 3)) * 255).astype(np.uint8)
    return Image.fromarray(field).resize((size, size), Image.Resampling.BICUBIC).convert(mode)


def near_copy(image: Image.Image) -> Image.Image:
    """90% of the size, recompressed as JPEG."""
    smaller = image.resize((image.width * 9 // 10, image.height * 9 // 10), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    smaller.save(out, "JPEG", quality=80)
    return Image.open(io.BytesIO(out.getvalue())).convert(image.mode)


def save(image: Image.Image, path: Path, **options) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, FORMATS[path.suffix[1:]], **options)
    return path


def run(source: Path, out: Path, parent: Path | None = None, **data) -> StagedImages:
    cfg = DataConfig(source=str(source), holdout_fraction=data.pop("holdout_fraction", 0.2), **data)
    with listing(cfg, ImageConfig()) as found:
        return prepare_images(found, cfg, ImageConfig(), out, parent=parent)


def test_class_folders_of_every_format_in_gray_and_colour(tmp_path):
    for i, (ext, mode) in enumerate((e, m) for e in FORMATS for m in ("L", "RGB")):
        save(picture(i, mode=mode), tmp_path / "src" / ("cat" if i % 2 else "dog") / f"{i}.{ext}")
    staged = run(tmp_path / "src", tmp_path / "out")
    got = {(row.source, row.label, row.channels, row.width, row.height) for row in staged.rows}
    want = {
        (f"{'cat' if i % 2 else 'dog'}/{i}.{e}", "cat" if i % 2 else "dog", 1 if m == "L" else 3, 32, 32)
        for i, (e, m) in enumerate((e, m) for e in FORMATS for m in ("L", "RGB"))
    }
    assert (got, read_table(staged.folder), all((staged.folder / r.path).is_file() for r in staged.rows)) == (
        want,
        staged.rows,
        True,
    )


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_an_index_of_path_and_label_relative_to_itself(tmp_path, kind):
    rows = [("pics/a.png", "ok"), ("pics/b.webp", "bad"), ("../outside.png", "ok"), ("pics/gone.png", "ok")]
    save(picture(1), tmp_path / "src" / "pics" / "a.png")
    save(picture(2), tmp_path / "src" / "pics" / "b.webp")
    save(picture(3), tmp_path / "outside.png")
    index = tmp_path / "src" / f"labels.{kind}"
    if kind == "csv":
        index.write_text("path,label\n" + "".join(f"{p},{label}\n" for p, label in rows))
    else:
        index.write_text("".join(json.dumps({"path": p, "label": label}) + "\n" for p, label in rows))
    staged = run(index, tmp_path / "out")
    seen = sorted((r.source, r.label) for r in staged.rows), staged.audit.names("path_outside_root")
    assert (seen, staged.audit.names("missing_file")) == (
        ([("pics/a.png", "ok"), ("pics/b.webp", "bad")], [f"labels.{kind}:{3 if kind == 'jsonl' else 4}"]),
        ["pics/gone.png"],
    )


def _broken(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    save(picture(1), src / "a" / "good.png")
    whole = save(picture(2, size=256), tmp_path / "whole.jpg")
    (src / "a" / "truncated.jpg").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    (src / "a" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 40)
    (src / "b").mkdir()
    (src / "b" / "notes.webp").write_text("not an image at all")
    return src


def test_corrupt_truncated_and_non_image_files_are_dropped_and_named(tmp_path):
    staged = run(_broken(tmp_path), tmp_path / "out")
    assert (sorted(staged.audit.names("undecodable")), [r.source for r in staged.rows]) == (
        ["a/corrupt.png", "a/truncated.jpg", "b/notes.webp"],
        ["a/good.png"],
    )


def test_fail_mode_stops_at_the_first_undecodable_file_and_names_it(tmp_path):
    with pytest.raises(SourceError, match=r"cannot decode a/corrupt\.png"):
        run(_broken(tmp_path), tmp_path / "out", on_error="fail")


def test_exif_gps_and_camera_serial_are_stripped_and_counted(tmp_path):
    exif = Image.Exif()
    exif[0x0110] = "Camera Model X"  # Model
    exif.get_ifd(0x8769)[0xA431] = "SERIAL-12345"  # BodySerialNumber
    exif.get_ifd(0x8825).update({1: "N", 2: (52.0, 31.0, 12.0), 3: "E", 4: (13.0, 24.0, 36.0)})
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    save(picture(1), tmp_path / "src" / "a" / "photo.jpg", exif=exif, icc_profile=icc)
    save(picture(2), tmp_path / "src" / "a" / "plain.png")
    staged = run(tmp_path / "src", tmp_path / "out")
    out = staged.folder / next(r.path for r in staged.rows if r.source == "a/photo.jpg")
    with Image.open(out) as image:
        left = (dict(image.getexif()), sorted(image.info), b"SERIAL" in out.read_bytes())
    assert (staged.audit.stripped, left) == (
        {"gps": 1, "camera_serial": 1, "exif": 1, "icc_profile": 1},
        ({}, [], False),
    )


def test_exact_and_near_duplicates_go_and_the_first_copy_stays(tmp_path):
    src = tmp_path / "src"
    save(picture(1, size=96), src / "a" / "1.png")
    save(picture(1, size=96), src / "a" / "2-exact.png")
    save(near_copy(picture(1, size=96)), src / "a" / "3-near.jpg")
    save(picture(2, size=96), src / "a" / "4-other.png")
    audit = run(src, tmp_path / "out").audit
    assert (audit.names("exact_duplicate"), audit.names("near_duplicate"), audit.images_out) == (
        ["a/2-exact.png"],
        ["a/3-near.jpg"],
        2,
    )


def test_an_image_under_two_labels_is_flagged_and_both_copies_go(tmp_path):
    save(picture(1), tmp_path / "src" / "cat" / "x.png")
    save(picture(1), tmp_path / "src" / "dog" / "x.bmp")
    save(picture(2), tmp_path / "src" / "dog" / "y.png")
    staged = run(tmp_path / "src", tmp_path / "out")
    assert (sorted(staged.audit.names("label_conflict")), [r.source for r in staged.rows]) == (
        ["cat/x.png", "dog/x.bmp"],
        ["dog/y.png"],
    )


def _splits(staged: StagedImages) -> dict[str, str]:
    return {row.sha256: row.split for row in staged.rows}


def test_the_split_is_sticky_when_images_are_added(tmp_path):
    for i in range(20):
        save(picture(i), tmp_path / "src" / str(i % 2) / f"{i:03d}.png")
    first = run(tmp_path / "src", tmp_path / "v1")
    for i in range(20, 60):  # new names sort first and last: the order of the listing changes
        save(picture(i), tmp_path / "src" / str(i % 2) / f"{i:03d}.png")
        save(picture(i + 100), tmp_path / "src" / str(i % 2) / f"000-{i}.png")
    second = run(tmp_path / "src", tmp_path / "v2", parent=first.folder)
    old = _splits(first)
    assert ({sha: _splits(second)[sha] for sha in old}, "holdout" in old.values()) == (old, True)


def test_no_near_copy_of_a_holdout_image_lands_in_train(tmp_path):
    for i in range(30):
        save(picture(i, size=96), tmp_path / "src" / "a" / f"{i:03d}.png")
    first = run(tmp_path / "src", tmp_path / "v1")
    held = [r for r in first.rows if r.split == "holdout"]
    for row in held:  # near copies, listed before their originals
        copy = near_copy(Image.open(tmp_path / "src" / row.source).convert("RGB"))
        save(copy, tmp_path / "src" / "a" / f"0-copy-{row.source[2:5]}.jpg")
    second = run(tmp_path / "src", tmp_path / "v2", parent=first.folder)
    train = [np.asarray(dhash(Image.open(second.folder / r.path), 16)) for r in second.rows if r.split == "train"]
    holdout = [dhash(Image.open(first.folder / r.path), 16) for r in held]
    closest = min(int((t != h).sum()) for t in train for h in holdout)
    assert (len(ImageAudit.read(second.folder).names("near_duplicate")), closest > 10) == (len(held), True)


def test_digits_are_offline_deterministic_and_match_scikit_learn(tmp_path):
    pixels, labels = builtin.digits_array()
    one = builtin.materialise("sklearn://digits", tmp_path / "one")
    two = builtin.materialise("sklearn://digits", tmp_path / "two")
    files = sorted(p.relative_to(one) for p in one.rglob("*.png"))
    same = all((one / f).read_bytes() == (two / f).read_bytes() for f in files)
    first = np.asarray(Image.open(one / str(labels[0]) / "0000.png"))
    assert (len(files), same, np.array_equal(first, pixels[0]), sorted({f.parts[0] for f in files})) == (
        1797,
        True,
        True,
        [str(d) for d in range(10)],
    )


def test_a_class_folder_listing_names_skips_loose_files_and_links_out_of_the_source(tmp_path):
    src = tmp_path / "src"
    save(picture(1), src / "cat" / "a.png")
    save(picture(2), src / "cat" / "deep" / "b.png")
    save(picture(3), src / "loose.png")
    save(picture(4), tmp_path / "outside.png")
    (src / "dog").mkdir()
    (src / "dog" / "out.png").symlink_to(tmp_path / "outside.png")
    (src / "dog" / "in.png").symlink_to(src / "cat" / "a.png")
    (src / "dog" / "notes.txt").write_text("not an image")
    with listing(DataConfig(source=str(src)), ImageConfig()) as found:
        listed = [(one.name, one.label, one.path) for one in found.images]
        skipped = found.skipped
    assert listed == [
        ("cat/a.png", "cat", str(src / "cat" / "a.png")),
        ("cat/deep/b.png", "cat", str(src / "cat" / "deep" / "b.png")),
        ("dog/in.png", "dog", str(src / "dog" / "in.png")),
    ]
    assert skipped == {
        "unlabelled": ["loose.png"],
        "not_an_image_file": ["dog/notes.txt"],
        "symlink_outside_root": ["dog/out.png"],
    }


def test_the_near_index_finds_the_earliest_hash_within_the_distance_and_nothing_further():
    """Against a brute-force search over random hashes and near copies of them."""
    from foundry.vision.neardup import NearIndex

    rng = np.random.default_rng(3)
    kept = [rng.random(256) < 0.5 for _ in range(300)]
    index = NearIndex(256, 4)
    for i, bits in enumerate(kept):
        index.add(bits, f"k{i}")
    for trial in range(400):
        query = kept[rng.integers(len(kept))].copy() if trial % 2 else rng.random(256) < 0.5
        query[rng.choice(256, rng.integers(0, 7), replace=False)] ^= True
        within = [(f"k{i}", int((bits != query).sum())) for i, bits in enumerate(kept) if (bits != query).sum() <= 4]
        assert index.nearest(query) == (within[0] if within else None)


@pytest.mark.parametrize("hash_size", [4, 5, 8, 11, 16, 32])
def test_packed_hashes_become_the_ledgers_words_as_before(hash_size):
    """The ledger's signatures from packed dHashes, several at once: the words that each hash's bits packed, zero-padded
    to whole big-endian uint32 words, gave before (the layout ledgers on disk hold), and back to the same bits."""
    bits = np.random.default_rng(hash_size).random((3, hash_size * hash_size)) < 0.5
    words = hash_words(hash_size)

    def before(one: np.ndarray) -> np.ndarray:
        packed = np.packbits(one)
        padded = np.zeros(-(-len(packed) // 4) * 4, np.uint8)
        padded[: len(packed)] = packed
        return padded.view(">u4").astype(np.uint32)

    packed = b"".join(np.packbits(one).tobytes().ljust(4 * words, b"\0") for one in bits)
    signatures = words_of(packed, words)
    assert signatures.dtype == np.uint32 and signatures.shape == (3, words)
    assert all(np.array_equal(row, before(one)) for row, one in zip(signatures, bits))
    assert all(np.array_equal(from_words(row, len(one)), one) for row, one in zip(signatures, bits))
    assert words_of(b"", words).shape == (0, words)


def test_an_image_worker_ends_at_sigterm_whatever_handler_the_flow_process_set(tmp_path):
    """A pool ends its workers with SIGTERM; forked from a flow, they raised Prefect's TerminationSignal instead and
    its traceback reached the run's log."""
    reader = _Reader(ImageConfig(), 1 << 20, frozenset(), tmp_path)
    assert exit_code_at_sigterm(lambda: _install(reader)) == -signal.SIGTERM


def test_a_stuck_image_reader_ends_prepare_with_an_error_naming_it_not_a_wait(tmp_path, monkeypatch):
    """A FIFO with no writer (listing passes regular files only) holds its reader in `open` for good."""
    monkeypatch.setattr(readpool, "STALL_S", 2)
    buffer = io.BytesIO()
    picture(0, 8).save(buffer, "PNG")
    paths = [tmp_path / "stuck.png"] + [tmp_path / f"{n}.png" for n in range(2 * readpool.MIN_PER_WORKER - 1)]
    os.mkfifo(paths[0])
    for path in paths[1:]:
        path.write_bytes(buffer.getvalue())
    started = time.monotonic()
    with pytest.raises(
        readpool.ReadersStalled,
        match=r"^the image readers sent nothing back in 2 s for the \d+ images from .*/stuck\.png;",
    ):
        readpool.read_images(paths, ImageConfig(workers=2), 1 << 20, frozenset(), tmp_path / "spools")
    assert time.monotonic() - started < 30
