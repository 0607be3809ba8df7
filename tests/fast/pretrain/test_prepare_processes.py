"""Preparation and its gate on worker processes of this machine (`data.workers`, no `data.scheduler`): the same
bytes and the same verdict as in this process, and nothing to start but the processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic import overrides, synthetic_docs

from foundry.config import load_config
from foundry.data.acquire import acquire_source
from foundry.pretrain.clean import line_ranges, read_chunk
from foundry.pretrain.prepare import partition_count
from foundry.pretrain.validate_documents import document_table
from tasks.data_parallel import run_prepare


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """More source bytes than two partitions of 64 KiB, personal data and a secret in some documents."""
    root = tmp_path_factory.mktemp("processes") / "corpus"
    root.mkdir()
    for i, text in enumerate(synthetic_docs(120, words=200)):
        extra = f"write to jane{i}@example.com or 8.8.4.{i}\nDB_PASSWORD=hunter{i}x\n" if i % 7 == 0 else ""
        (root / f"doc{i:03d}.txt").write_text(text + extra)
    return root


def prepared(corpus: Path, base: Path, workers: int) -> Path:
    config = load_config(
        None, overrides(corpus, "data.pii=[]", "data.partition_bytes=65536", f"data.workers={workers}")
    )
    manifest = acquire_source(config.data, base / "m.json")
    assert partition_count(manifest.entries, config.data, max(workers, 1)) >= 2
    run_prepare(manifest, config, base / "prepared", progress=False)
    return base / "prepared"


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_two_worker_processes_prepare_the_bytes_of_one(corpus, tmp_path):
    one = prepared(corpus, tmp_path / "one", 1)
    two = prepared(corpus, tmp_path / "two", 2)
    assert files(two) == files(one)
    assert (one / "train_000.bin").stat().st_size > 0


def test_the_gate_finds_the_same_kinds_in_pieces_on_two_processes(corpus, tmp_path):
    folder = prepared(corpus, tmp_path, 1)
    one = document_table(folder, ["email"], workers=1)
    two = document_table(folder, ["email"], workers=2)
    assert two.equals(one)
    assert set(one["pii_found"]) == {"", "ipv4,secret_assignment"} and set(one["pii_allowed"]) == {"", "email"}
    assert one["in_split_file"].all()


@pytest.mark.parametrize("count", [1, 2, 3, 7, 50])
def test_line_ranges_cover_the_file_in_whole_lines(tmp_path, count):
    path = tmp_path / "split.jsonl"
    texts = [f"document {i} " * (i % 5 + 1) for i in range(9)]
    path.write_text("".join(f'{{"text": "{t}"}}\n' for t in texts))
    ranges = line_ranges(path, count)
    assert ranges[0][0] == 0 and ranges[-1][1] == path.stat().st_size
    assert all(end == start for (_, end), (start, _) in zip(ranges, ranges[1:]))
    assert 1 <= len(ranges) <= min(count, len(texts))
    assert [t for start, end in ranges for t in read_chunk(path, start, end)] == texts


def test_line_ranges_of_an_empty_file_are_none(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert line_ranges(tmp_path / "empty.jsonl", 4) == []


def test_progress_moves_as_each_partition_cleaned_elsewhere_comes_back(corpus, tmp_path):
    """Files cleaned by worker processes are counted here as their partition comes back, not all at the end."""
    from foundry.core.preparing import PrepareRun, Preparing
    from foundry.core.process_pool import serial_map
    from foundry.data.progress import read_preparation
    from foundry.pretrain.prepare import prepare

    config = load_config(None, overrides(corpus, "data.partition_bytes=65536", "data.progress_every_s=0.000001"))
    manifest = acquire_source(config.data, tmp_path / "m.json")
    progress, counts = tmp_path / "progress.json", []

    def elsewhere(step, jobs, each=None):  # runs here, but counts as a mapper that is not this process's own
        def counted(job, result):
            each(job, result)
            counts.append(read_preparation(progress).files)

        return serial_map(step, jobs, counted if each else None)

    prepare(Preparing(manifest, config, tmp_path / "prepared", running=PrepareRun(elsewhere, 2, progress)))
    sizes = [len(p) for p in partitions_of(manifest, config)]
    assert len(sizes) >= 2 and counts == [sum(sizes[: i + 1]) for i in range(len(sizes))]


def partitions_of(manifest, config):
    from foundry.pretrain.prepare import partitions

    return partitions(manifest.entries, partition_count(manifest.entries, config.data, 2))


def test_where_the_map_steps_run_is_not_part_of_the_dataset_key(corpus):
    """They give the same bytes, so a run on other workers finds the dataset an earlier run prepared."""
    from foundry.data.versioning import dataset_key

    keys = {
        dataset_key(load_config(None, overrides(corpus, *settings)), "digest")
        for settings in (
            [],
            ["data.workers=1"],
            ["data.workers=3", "data.scheduler=local"],
            ["data.partition_bytes=1000000"],
        )
    }
    assert len(keys) == 1
    assert dataset_key(load_config(None, overrides(corpus, "data.min_chars=10")), "digest") not in keys
