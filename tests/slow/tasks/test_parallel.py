"""tasks.data_parallel: prepare as Prefect tasks on Dask, or on worker processes, gives the same bytes as in-process,
for 1 to 4 workers."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import pytest
from homes import seeded_home
from synthetic import WORDS

from foundry.config import load_config
from foundry.core.contracts import SourceFile
from foundry.data.acquire import acquire_source
from foundry.pretrain.clean import BadInputError
from foundry.pretrain.prepare import partition_count, partitions
from tasks.data_parallel import PRE_SPAWN_ENV, WORKER_ENV, environment_kept, run_prepare, started, task_runner


def doc(seed: int, n: int = 80) -> str:
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(n // 8)) + f"\nend {seed}\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Files of several formats, with duplicates and near duplicates across files, PII and bad input."""
    root = tmp_path_factory.mktemp("parallel") / "corpus"
    root.mkdir()
    for i in range(24):
        (root / f"doc{i:02d}.txt").write_text(doc(i) + ("contact me at jane@example.com\n" if i % 5 == 0 else ""))
    (root / "copy.txt").write_text(doc(3))
    (root / "near.md").write_text(doc(4).replace("end 4", "the end 4"))
    records = "".join(json.dumps({"text": doc(100 + i)}) + "\n" for i in range(10)) + "{broken\n"
    (root / "records.jsonl.gz").write_bytes(gzip.compress(records.encode()))
    (root / "empty.txt").write_text("")
    return root


def config(root: Path, *extra: str):
    return load_config(
        None,
        [
            f"data.source={root}",
            "data.holdout_fraction=0.2",
            "data.partition_bytes=65536",
            "tokenizer.vocab_size=300",
            "model.block_size=16",
            *extra,
        ],
    )


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture(scope="module")
def serial(corpus, tmp_path_factory):
    """In-process preparation: what every Dask run must reproduce byte for byte. Also the source manifest."""
    cfg = config(corpus, "data.workers=1")
    base = tmp_path_factory.mktemp("serial")
    manifest = run_prepare(acquire_source(cfg.data, base / "m.json"), cfg, base / "prepared", progress=False).manifest
    return manifest, files(base / "prepared"), base / "m.json"


def _changed(before: dict) -> set[str]:
    return {k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)}


@pytest.fixture(scope="module")
def started_cluster():
    """An existing Dask cluster (one worker), started as tasks.data_parallel starts one; yields it and the
    environment variables its start changed in this process (seen inside `environment_kept`)."""
    from distributed import LocalCluster

    before = dict(os.environ)
    with environment_kept():
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0")
        changed_inside = _changed(before)
    with cluster:
        yield cluster, changed_inside, before


@pytest.fixture(scope="module")
def scheduler(started_cluster):
    return started_cluster[0].scheduler_address


def test_starting_a_local_cluster_leaves_this_process_environment_alone(started_cluster):
    """Dask's nanny sets OMP_NUM_THREADS=1 and more in its parent for good; training started later in the
    same process then summed floats on one thread, and an exact resume came out different."""
    _, changed_inside, before = started_cluster
    assert {"OMP_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_"} & changed_inside
    assert not changed_inside & _changed(before)


def test_the_clusters_workers_have_this_environment_and_worker_env_and_nothing_of_the_nannys(monkeypatch):
    """The nanny's MALLOC_TRIM_THRESHOLD_ made cleaning 1.13x as long (bench/README.md)."""
    import dask
    import distributed  # noqa: F401  (its config, the nanny's variables among it)

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    names = sorted({*dask.config.get(PRE_SPAWN_ENV), *WORKER_ENV})
    assert "MALLOC_TRIM_THRESHOLD_" in names
    expected = {name: WORKER_ENV.get(name, os.environ.get(name)) for name in names}
    with started(task_runner(load_config(None, ["data.workers=2"]).data)) as runner:
        seen = runner.client.submit(lambda: {name: os.environ.get(name) for name in names}).result()
    assert seen == expected and seen["MALLOC_TRIM_THRESHOLD_"] is None and seen["OMP_NUM_THREADS"] == "1"


def test_partitions_keep_corpus_order_and_balance():
    entries = [
        SourceFile(path=str(i), name=str(i), size=size, sha256="")
        for i, size in enumerate([10, 10, 10, 10, 60, 0, 0, 10])
    ]
    parts = partitions(entries, 3)
    assert [e.name for part in parts for e in part] == [str(i) for i in range(8)]
    assert [sum(e.size for e in part) for part in parts] == [40, 60, 10]
    assert len(partitions(entries, 20)) <= 8
    assert partition_count(entries, load_config(None, ["data.partition_bytes=65536"]).data, 2) == 2


def test_serial_output(serial):
    manifest, out, _ = serial
    stats = manifest.stats
    assert stats["dropped_exact_duplicate"] == 1 and stats["dropped_near_duplicate"] == 1
    assert stats["dropped_malformed_jsonl"] == 1 and stats["dropped_empty_file"] == 1
    assert stats["pii_email_docs"] == 5 and stats["docs_out"] == 34
    assert {"audit.json", "audit.md", "manifest.json", "tokenizer.json", "train_000.bin", "holdout_000.bin"} <= set(out)


def test_existing_scheduler_with_one_worker_gives_the_same_bytes(prefect_harness, corpus, serial, scheduler, tmp_path):
    cfg = config(corpus, f"data.scheduler={scheduler}")
    run_prepare(acquire_source(cfg.data, tmp_path / "m.json"), cfg, tmp_path / "prepared")
    assert files(tmp_path / "prepared") == serial[1]


@pytest.mark.parametrize("workers", [3, 4])
def test_three_and_four_local_workers_give_the_same_bytes(prefect_harness, corpus, serial, workers, tmp_path):
    """As many partitions as workers (the corpus is below `partition_bytes`), so the partition steps, the
    encoding chunks and their merge in corpus order all run with 3 and 4 pieces on a cluster of that size."""
    cfg = config(corpus, "data.scheduler=local", f"data.workers={workers}")
    manifest = acquire_source(cfg.data, tmp_path / "m.json")
    assert len(partitions(manifest.entries, partition_count(manifest.entries, cfg.data, workers))) == workers
    run_prepare(manifest, cfg, tmp_path / "prepared", progress=False)
    assert files(tmp_path / "prepared") == serial[1]


def test_bad_input_stops_a_dask_run_with_its_message(prefect_harness, corpus, scheduler, tmp_path):
    cfg = config(corpus, f"data.scheduler={scheduler}", "data.on_error=fail")
    with pytest.raises(BadInputError, match="^empty.txt: empty file"):  # the first bad input in corpus order
        run_prepare(acquire_source(cfg.data, tmp_path / "m.json"), cfg, tmp_path / "prepared")


def cli_prepare(corpus: Path, serial_manifest: Path, tmp_path: Path, *workers: str) -> str:
    """`foundry prepare` on the test corpus with `workers`'s settings, no Prefect server configured: its output."""
    import shutil
    import subprocess
    import sys

    shutil.copy(serial_manifest, tmp_path / "m.json")
    settings = [
        f"data.source={corpus}",
        "data.holdout_fraction=0.2",
        "data.partition_bytes=65536",
        "tokenizer.vocab_size=300",
        "model.block_size=16",
        *workers,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env["FOUNDRY_HOME"] = str(seeded_home(tmp_path / "home"))
    result = subprocess.run(
        [sys.executable, "-m", "foundry.cli", "prepare", "--manifest", "m.json", "--out", "prepared"]
        + [arg for setting in settings for arg in ("--set", setting)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "m.json", "prepared", "prepared_validation.json"]
    return log


def test_cli_prepare_on_a_local_dask_cluster_without_a_prefect_server(corpus, serial, tmp_path):
    """`foundry prepare` on a local cluster of 2 workers gives the in-process bytes. With no
    PREFECT_API_URL the flow's temporary server is the only one: the workers report to it rather than
    each starting their own (~15 s a worker, and task runs scattered over several databases)."""
    log = cli_prepare(corpus, serial[2], tmp_path, "data.scheduler=local", "data.workers=2")
    assert log.count("Starting temporary server") == 1, log[-3000:]
    assert log.count("Task run 'clean-partition") == 2 and log.count("Task run 'encode-chunk") == 2
    assert files(tmp_path / "prepared") == serial[1]


def test_cli_prepare_on_two_worker_processes_starts_no_server_and_no_cluster(corpus, serial, tmp_path):
    """`data.workers` without `data.scheduler`: worker processes of this machine, nothing else to start."""
    log = cli_prepare(corpus, serial[2], tmp_path, "data.workers=2")
    assert "temporary server" not in log and "Dask" not in log and "Task run" not in log, log[-3000:]
    assert files(tmp_path / "prepared") == serial[1]
