"""A training resumed at another world size against an uninterrupted one, and against the noise of two seeds.

    python bench/world_change.py [--config configs/tiny.yaml] [--steps 300] [--seeds 1337 1338] [--set k=v ...]

Three trainings of one config, each with a global batch of 2 micro-batches of `train.batch_size` rows:
A: 1 rank accumulating 2 micro-batches, seed S1, to the end; B: the same at seed S2 (the noise of two seeds);
C: seed S1 at 2 ranks (gloo, `foundry.training.launch.launch`, no accumulation) until its first checkpoint at or past
half the steps, where rank 1 is killed (a node lost), then resumed on 1 rank from the newest checkpoint
(`train.devices=1`, nothing else changed: the accumulation of 2 is derived from the saved global batch) to the end.
A and C draw the same training windows each step (tests/slow/training/test_world_change.py counts them); they differ
by the summing order of the gradients and the threads of each rank. Each run logs to MLflow in a throwaway home:
the training loss (`train/loss`, the mean over each `train.log_every_n_steps` window) is compared after the resume,
|C - A| against |B - A|, and each final model is scored on the holdout with the pipeline's own `holdout_metrics`.
The last line is the headline: how far C's final holdout loss is from A's, against how far B's is.
"""

from __future__ import annotations

import argparse
import atexit
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if "FOUNDRY_HOME" not in os.environ:  # a throwaway home (MLflow store, data, checkpoints), removed at exit
    os.environ["FOUNDRY_HOME"] = tempfile.mkdtemp(prefix="foundry-bench-")
    atexit.register(shutil.rmtree, os.environ["FOUNDRY_HOME"], True)

from foundry.runtime.env import configure_environment  # noqa: E402

configure_environment()  # before the libraries load

sys.path.insert(0, str(Path(__file__).resolve().parent))
from defaults import prepared  # noqa: E402

DATA_VERSION = "bench"


def rank_pid(rank: int) -> int | None:
    """The pid of training rank `rank` started by this process's elastic agent (from /proc), or None."""
    from foundry.training.launch import TRAIN_ENTRY

    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_text()
            environ = Path(f"/proc/{entry.name}/environ").read_text()
            parent = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:  # ended meanwhile
            continue
        env = dict(v.split("=", 1) for v in environ.split("\0") if "=" in v)
        if parent == str(os.getpid()) and TRAIN_ENTRY in cmdline and env.get("RANK") == str(rank):
            return int(entry.name)
    return None


def launched(config, data: Path, folder: Path, run_id: str) -> Path:
    """`launch` in a child process of its own (a 1-rank launch trains in the calling process)."""
    from foundry.training.launch import launch

    return launch(config, data, folder, run_id, DATA_VERSION)


def one_rank(config, data: Path, folder: Path) -> tuple[str, Path, float]:
    """An uninterrupted 1-rank training in a fresh process: (MLflow run id, model.pt, seconds)."""
    from foundry.runtime import tracking

    run_id = tracking.start_pipeline_run(config)
    start = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        model_pt = child.submit(launched, config, data, folder, run_id).result()
    return run_id, model_pt, time.perf_counter() - start


def two_then_one(two, one, data: Path, folder: Path, half: int) -> tuple[str, str, int, Path, float]:
    """`two` at 2 ranks until a checkpoint at or past step `half`, rank 1 killed there, then `one` resumed from the
    newest checkpoint: (first run id, resumed run id, the step resumed from, model.pt, seconds)."""
    from foundry.checkpointing.manifest import read_manifest
    from foundry.runtime import tracking
    from foundry.training.launch import TrainingFailed, launch

    first = tracking.start_pipeline_run(two)
    start = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(launch, two, data, folder, first, DATA_VERSION)
        try:
            while not any(e.step >= half for e in read_manifest(folder)):
                if future.done():
                    future.result()  # raises what ended it
                    raise SystemExit(f"the 2-rank training ended before step {half}: raise --steps")
                time.sleep(0.02)
            os.kill(rank_pid(1), signal.SIGKILL)  # the node of rank 1, lost for good
            try:
                future.result(timeout=120)
                raise SystemExit("the 2-rank training went on without rank 1")
            except TrainingFailed:
                pass
        finally:
            for rank in (0, 1):
                if (pid := rank_pid(rank)) is not None:
                    os.kill(pid, signal.SIGKILL)
    resumed = tracking.start_pipeline_run(one)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        model_pt = child.submit(launched, one, data, folder, resumed).result()
    seconds = time.perf_counter() - start
    return first, resumed, int(tracking.client().get_run(resumed).data.tags["resumed_from_step"]), model_pt, seconds


def curve(run_id: str) -> dict[int, float]:
    from foundry.runtime import tracking

    return dict(tracking.metric_history(run_id, "train/loss"))


def gaps(x: dict[int, float], y: dict[int, float], after: int) -> tuple[float, float, int]:
    """Max and mean |x - y| over the logged steps past `after` that both have, and how many."""
    d = [abs(x[s] - y[s]) for s in sorted(x.keys() & y.keys()) if s > after]
    return max(d), sum(d) / len(d), len(d)


def holdout_loss(config, data: Path, model_pt: Path):
    from foundry.pretrain.holdout_metrics import holdout_metrics
    from models.gpt import load_gpt

    e = config.evaluation
    return holdout_metrics(
        load_gpt(model_pt), data / "tokenizer.json", data, e.batch_size, e.max_tokens, e.window_overlap
    )


def main() -> int:
    import torch

    from foundry.config import load_config
    from foundry.runtime import tracking

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/tiny.yaml"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs=2, default=(1337, 1338), metavar=("S1", "S2"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    s1, s2 = args.seeds
    common = [*args.overrides, f"train.max_steps={args.steps}"]
    a = load_config(args.config, [*common, "train.devices=1", "train.grad_accum_steps=2", f"train.seed={s1}"])
    b = load_config(args.config, [*common, "train.devices=1", "train.grad_accum_steps=2", f"train.seed={s2}"])
    # C: 2 ranks without accumulation (the same global batch), then the same config with one device fewer.
    two = load_config(args.config, [*common, "train.devices=2", "train.grad_accum_steps=1", f"train.seed={s1}"])
    one = load_config(args.config, [*common, "train.devices=1", "train.grad_accum_steps=1", f"train.seed={s1}"])
    work = Path(os.environ["FOUNDRY_HOME"]) / "bench-world-change"
    data = prepared(a, work, {})
    start = time.perf_counter()
    run_a, model_a, sec_a = one_rank(a, data, work / "A")
    print(f"A (1 rank, seed {s1}): {sec_a:.1f} s", flush=True)
    run_b, model_b, sec_b = one_rank(b, data, work / "B")
    print(f"B (1 rank, seed {s2}): {sec_b:.1f} s", flush=True)
    first_c, run_c, resumed_at, model_c, sec_c = two_then_one(two, one, data, work / "C", args.steps // 2)
    tags = tracking.client().get_run(run_c).data.tags
    accum = torch.load(model_c, weights_only=True)["config"]["train"]["grad_accum_steps"]
    print(
        f"C (seed {s1}, 2 ranks, rank 1 killed, resumed at 1 rank from step {resumed_at}, train.world_sizes "
        f"{tags['train.world_sizes']}, grad_accum_steps {accum} after the resume): {sec_c:.1f} s",
        flush=True,
    )
    if tags["train.world_sizes"] != "2,1" or not 0 < resumed_at < args.steps or accum != 2:
        raise SystemExit("C was not a 2 -> 1 resume with its global batch: the comparison would mean nothing")

    la, lb = curve(run_a), curve(run_b)
    lc = {s: v for s, v in curve(first_c).items() if s <= resumed_at} | curve(run_c)
    c_max, c_mean, n = gaps(lc, la, resumed_at)
    b_max, b_mean, _ = gaps(lb, la, resumed_at)
    bm, bmean, bn = gaps({s: v for s, v in lc.items() if s <= resumed_at}, la, 0)
    print(
        f"train/loss, {n} logged steps after step {resumed_at}: |C - A| max {c_max:.2e} mean {c_mean:.2e}; "
        f"|B - A| max {b_max:.2e} mean {b_mean:.2e}"
    )
    print(
        f"train/loss, {bn} logged steps up to step {resumed_at} (C at 2 ranks): |C - A| max {bm:.2e} mean {bmean:.2e}"
    )
    last = max(la.keys() & lb.keys() & lc.keys())
    scores = {name: holdout_loss(a, data, m) for name, m in (("A", model_a), ("B", model_b), ("C", model_c))}
    for name, m in scores.items():
        loss = dict(A=la, B=lb, C=lc)[name][last]
        print(
            f"{name}: train/loss at the last logged step ({last}) {loss:.6f}, holdout loss {m.loss:.6f} nats/token, "
            f"{m.bits_per_byte:.6f} bits/byte"
        )
    x = abs(scores["C"].loss - scores["A"].loss)
    y = abs(scores["B"].loss - scores["A"].loss)
    xb = abs(scores["C"].bits_per_byte - scores["A"].bits_per_byte)
    yb = abs(scores["B"].bits_per_byte - scores["A"].bits_per_byte)
    print(f"wall time {time.perf_counter() - start:.0f} s (data preparation not counted)")
    print(
        f"world change 2->1 at step {resumed_at} of {args.steps}: final holdout loss differs from the uninterrupted "
        f"run by {x:.2e} nats/token ({xb:.2e} bits/byte), two seeds differ by {y:.2e} ({yb:.2e}) "
        f"(ratio {x / y:.1e}); train/loss after the resume: mean |C-A| {c_mean:.2e} vs mean |B-A| {b_mean:.2e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
