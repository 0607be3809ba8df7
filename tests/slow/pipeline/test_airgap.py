"""Air-gapped operation: the tiny pipeline in a network namespace that has only loopback, with every
Python process of the run (CLI, Prefect server, Dask workers, training ranks) auditing its own sockets.
The same run carries a planted canary document that `foundry purge --apply` then removes, offline too:
afterwards no byte under $FOUNDRY_HOME and no decoded token shard holds it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT
from helpers_configs import NO_BASELINES
from homes import seeded_home

NETAUDIT = REPO_ROOT / "tests" / "netaudit"  # sitecustomize.py (the audit hook) and loopback_up.py
MODEL_NAME = "airgap-gpt"
MODEL = f"models:/{MODEL_NAME}/1"
CANARY = "quokka marmalade"  # in no file of the standard library's email package
CANARY_REGEX = r"quokka\s+marmalade"
CANARY_TEXT = (  # passes every cleaning rule; the e-mail address makes the PII audit name it as an example
    "Minutes of the garden committee. The quokka marmalade recipe was approved after a long debate about "
    "oranges, sugar and patience. Send corrections to jane.doe@example.com before the next meeting. Members "
    "agreed that the jars should be labelled clearly, stored somewhere cool, and shared with the neighbours "
    "who helped at the harvest festival last autumn.\n"
)
RECORD = re.compile(r"purge-\d{8}T\d{6}-[0-9a-f]{8}")
# Recorded with the version: the purge's retrain and `foundry reproduce` evaluate the same way.
QUICK_EVALUATION = [arg for value in NO_BASELINES for arg in ("--set", value)]


def loopback_only_prefix() -> list[str]:
    """A command prefix that runs what follows in a new network namespace with `lo` up: `unshare -n`
    (needs root), else `unshare -rn` (a user namespace; unprivileged where the kernel allows it). Where
    neither works the test fails under CI (the variable CI is set) and is skipped elsewhere: a CI that
    passes without the namespace has proved nothing about air gaps."""
    problems = []
    if shutil.which("unshare") is None:
        problems.append("unshare (util-linux) is not installed")
    else:
        for flags in ("-n", "-rn"):
            probe = subprocess.run(["unshare", flags, "true"], capture_output=True, text=True)
            if probe.returncode == 0:
                return ["unshare", flags, sys.executable, str(NETAUDIT / "loopback_up.py")]
            problems.append(f"unshare {flags}: {probe.stderr.strip()}")
    reason = "no network namespace can be made here: " + "; ".join(problems)
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def audited_env(tmp_path: Path, log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(NETAUDIT), env.get("PYTHONPATH")]))
    env["FOUNDRY_NET_AUDIT"] = str(log)
    env["FOUNDRY_HOME"] = str(tmp_path / "home")
    return env


def records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_audit_hook_records_attempts_beyond_loopback(tmp_path):
    """The control: in the same kind of namespace, a process that tries to leave is caught, both the
    connection and the name lookup (they fail there, but the attempt is recorded before the call)."""
    log = tmp_path / "audit.jsonl"
    attempt = (
        "import socket\n"
        "for call in (lambda: socket.socket().connect(('192.0.2.1', 9)),\n"
        "             lambda: socket.getaddrinfo('example.com', 80),\n"
        "             lambda: socket.socket().connect(('127.0.0.1', 9))):\n"
        "    try:\n"
        "        call()\n"
        "    except OSError:\n"
        "        pass\n"
    )
    command = [*loopback_only_prefix(), sys.executable, "-c", attempt]
    result = subprocess.run(command, env=audited_env(tmp_path, log), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = [(r["event"], r["target"]) for r in records(log) if r["event"] != "started"]
    assert seen == [("socket.connect", "('192.0.2.1', 9)"), ("socket.getaddrinfo", "'example.com'")]


def canary_source(tmp_path: Path) -> Path:
    """configs/tiny.yaml's source (stdlib://email) copied, plus the canary; named to be read first, so that
    its e-mail address is among the audit's few examples."""
    source = tmp_path / "source"
    stdlib_email = Path(sysconfig.get_paths()["stdlib"]) / "email"
    shutil.copytree(stdlib_email, source, ignore=shutil.ignore_patterns("__pycache__"))
    (source / "000_canary.txt").write_text(CANARY_TEXT)
    return source


def offline(tmp_path: Path, log: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python ARGV...` in its own loopback-only namespace, audited into `log`, on the test's $FOUNDRY_HOME."""
    command = [*loopback_only_prefix(), sys.executable, *argv]
    env = audited_env(tmp_path, log)
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def purge(tmp_path: Path, log: Path, *flags: str) -> subprocess.CompletedProcess:
    return offline(tmp_path, log, "-m", "foundry.cli", "purge", "--match", CANARY_REGEX, "--reason", "test", *flags)


def dry_run(tmp_path: Path, log: Path) -> dict:
    result = purge(tmp_path, log, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def model_version(home: Path, version: str) -> dict:
    """A registered version's aliases and tags, read from the run's embedded MLflow store (a file: no server)."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{home / 'mlflow' / 'mlflow.db'}"
    found = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version(MODEL_NAME, version)
    return {"aliases": list(found.aliases), "tags": dict(found.tags)}


def files_holding(home: Path, needle: bytes) -> list[str]:
    """Every file under `home` whose bytes hold `needle`: SQLite databases and their WAL files included."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and needle in p.read_bytes())


def tokenizer_files(home: Path) -> list[Path]:
    """Each `tokenizer.json` under `home`: checked-out ones, and the DVC objects a version's listing names so."""
    found = list(home.rglob("tokenizer.json"))
    for listing in home.rglob("*.dir"):  # STORE/files/md5/ab/cdef….dir: [{"md5": …, "relpath": …}, …]
        for entry in json.loads(listing.read_text()):
            if entry["relpath"] == "tokenizer.json":
                found.append(listing.parent.parent / entry["md5"][:2] / entry["md5"][2:])
    return [path for path in found if path.is_file()]


def shards_holding(home: Path, phrase: str) -> tuple[list[str], int]:
    """Token shards under `home` whose decoded text holds `phrase`, and how many arrays were decoded: each `*.bin`
    file, and each DVC object (caches, remote) that is a valid token array (uint16 little-endian, every id below
    the vocabulary size), decoded with each distinct tokenizer of the home (foundry/pretrain/shards.py)."""
    from tokenizers import Tokenizer

    distinct = {path.read_bytes(): path for path in tokenizer_files(home)}
    decoders = [Tokenizer.from_file(str(path)) for path in distinct.values()]
    candidates = [
        p for p in home.rglob("*") if p.is_file() and (p.suffix == ".bin" or ("md5" in p.parts and p.suffix != ".dir"))
    ]
    holding, decoded = set(), 0
    for path in candidates:
        data = path.read_bytes()
        ids = np.frombuffer(data[: len(data) - len(data) % 2], dtype="<u2")
        for tokenizer in decoders:
            if len(ids) and int(ids.max()) < tokenizer.get_vocab_size():
                decoded += 1
                if phrase in tokenizer.decode(ids.tolist(), skip_special_tokens=False):
                    holding.add(str(path.relative_to(home)))
    return sorted(holding), decoded


def test_tiny_pipeline_passes_with_loopback_only_and_no_process_tries_to_leave(tmp_path):
    """Data preparation on a local Dask cluster of 2 workers and training on 2 ranks, so that every kind of process runs; then the
    purge of the planted canary, a dry run, `--apply` and the checks that it left no copy, all offline."""
    log, home = tmp_path / "audit.jsonl", seeded_home(tmp_path / "home")
    result = offline(
        tmp_path,
        log,
        *("-m", "foundry.cli", "run", "--config", "configs/tiny.yaml"),
        *("--set", "registry.model_name=airgap-gpt", "--set", "data.workers=2", "--set", "data.scheduler=local"),
        *("--set", "train.devices=2", "--set", "train.max_steps=15"),  # one validation; no figure is read
        *("--set", f"data.source={canary_source(tmp_path)}"),
        *QUICK_EVALUATION,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Foundry pipeline finished" in result.stdout
    assert MODEL in result.stdout
    seen = records(log)
    started = [r["target"] for r in seen if r["event"] == "started"]
    # The audit reached every kind of process the run starts, not only the one the test started.
    assert any("foundry.cli run" in c for c in started), started
    assert any("prefect" in c and ("uvicorn" in c or "server" in c) for c in started), started
    assert sum("multiprocessing" in c for c in started) >= 2, started  # Dask's worker processes (spawned)
    assert sum("foundry.training.worker" in c for c in started) == 2, started

    replacement = assert_the_purge_leaves_no_copy(tmp_path, log, home)
    assert_gc_then_reproduce_from_the_remote(tmp_path, log, home, replacement)

    seen = records(log)
    command_of = {r["pid"]: r["target"] for r in seen if r["event"] == "started"}
    attempts = [
        f"{r['event']} {r['target']} by {command_of.get(r['pid'], r['pid'])}" for r in seen if r["event"] != "started"
    ]
    assert attempts == [], "\n".join(attempts)


def assert_the_purge_leaves_no_copy(tmp_path: Path, log: Path, home: Path) -> None:
    plan = dry_run(tmp_path, log)
    assert len(plan["documents"]) == 1, plan["counts"]  # the canary, and no document of the email package
    (hit,) = plan["data_versions"]
    version = hit["data_version"]
    holds = {f["file"]: f["holds"] for f in hit["files"]}
    assert {"documents.csv", "ledger.csv", "ledger_minhash.npy", "audit.json"} <= set(holds), holds
    assert {"text"} == {holds[f] for f in holds if f.endswith(".jsonl")}  # its split's lines
    assert {"tokens"} == {holds[f] for f in holds if f.endswith(".bin")}  # its span in a token shard, decoded
    places = {c["place"] for c in hit["copies"]}
    assert places == {"workspace", "workspace cache", "remote", "hydration cache", "hydrated copy"}, places
    logged = {a["path"].split("/artifacts/", 1)[1] for a in plan["artifacts"]}
    assert {"data/audit.json", "data/source_manifest.json"} <= logged, logged  # they name its file
    assert [m["model"] for m in plan["models"]] == [MODEL]
    assert plan["unchecked"] == [], plan["unchecked"]  # else --apply refuses
    assert "champion" in model_version(home, "1")["aliases"]
    # The checks below can fail: before the purge they find the canary in the version's text and its shards.
    split_files = {f"hydrated/{version}/{split}.jsonl" for split in ("train", "holdout")}
    assert split_files & set(files_holding(home, CANARY.encode()))
    assert shards_holding(home, CANARY)[0] != []

    applied = purge(tmp_path, log, "--apply", "--retrain")
    assert applied.returncode == 0, applied.stderr[-3000:]
    (record,) = set(RECORD.findall(applied.stdout))  # the purge record, printed
    assert "verified: a second search finds none" in applied.stdout
    replacement = re.search(rf"^{version}\s+([0-9a-f]{{32}})$", applied.stdout, re.M).group(1)
    assert f"retrained {MODEL_NAME} on {replacement}: models:/{MODEL_NAME}/2" in applied.stdout

    assert files_holding(home, CANARY.encode()) == []
    holding, decoded = shards_holding(home, CANARY)
    assert holding == [] and decoded >= 2  # the replacement version's shards were read
    registered = model_version(home, "1")
    assert "champion" not in registered["aliases"] and registered["tags"].get("foundry.purge") == record
    retrained = model_version(home, "2")
    assert "champion" in retrained["aliases"] and retrained["tags"]["data_version"] == replacement
    # A second search in the same process found nothing ("verified" above); a fresh process's dry run finding
    # nothing is tests/fast/purge/test_purge.py::test_the_same_purge_again_finds_nothing_and_records_nothing.
    return replacement


def assert_gc_then_reproduce_from_the_remote(tmp_path: Path, log: Path, home: Path, data_version: str) -> None:
    """`foundry gc --apply` keeping nothing it may delete, then, as on a fresh node, with neither the retrained
    version's hydrated copy nor the hydration cache: `foundry reproduce` hydrates it from the remote, trains again
    and gets identical holdout metrics."""
    from foundry.runtime.tracking import git_state

    gc = ("gc", "--config", "configs/tiny.yaml", "--keep-last", "0", "--min-age-minutes", "0", "--apply")
    collected = offline(tmp_path, log, "-m", "foundry.cli", *gc)
    assert collected.returncode == 0 and "reclaimed" in collected.stdout, collected.stderr[-3000:]
    shutil.rmtree(home / "hydrated")
    force = ["--force"] if git_state()["git_dirty"] != "false" else []  # a checkout being worked on; CI's is clean
    again = offline(tmp_path, log, "-m", "foundry.cli", "reproduce", f"models:/{MODEL_NAME}/2", *force, timeout=600)
    assert again.returncode == 0 and "identical holdout metrics" in again.stdout, again.stdout[-2000:]
    assert (home / "hydrated" / data_version).is_dir()  # hydrated again, from the remote
