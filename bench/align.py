"""Alignment measured on what the model does: the default base, SFT and DPO on the generated instruction set.

    python bench/align.py [--base models:/foundry-gpt/1] [--home bench/out/align-home] [--train 8000]
                          [--sft-set align.train.max_steps=3000 ...] [--dpo-set align.replay_fraction=0 ...]

1. The default base model (`make run`'s: 2 layers, width 144, BPE-4096 on the standard library): `--base`, else
   the champion `foundry-gpt` in `--home`'s registry, else trained here by the train pipeline with the defaults.
2. The instruction set (`foundry.align.instructions`): seven tasks (two copy tasks among them), training
   instances, held-out instances of seen words and numbers that share no word set, operand pair or (field,
   last word) answer with a training instance (test), instances of unseen words (oov), preference pairs
   (chosen right, rejected a plausible wrong answer). The reuse is counted and printed.
3. SFT of the base and DPO of the SFT version, each through the align flow (`flows.align.align`): the data
   stage, Lightning training with checkpoints, the gate and the registry, as `foundry align` runs them, at the
   package defaults (each method's recipe, `align.sft_train` / `align.dpo_train`, and `align.replay_fraction`)
   unless `--sft-set` / `--dpo-set` override them.
4. Greedy exact match per task on test and oov for the base (with the template's tokens added), the SFT and the
   DPO model; held-out preference accuracy (chosen's summed log-probability strictly above rejected's); the
   copy tasks (repeat, last word) on words that occur nowhere else in the instruction set.

The baseline is the base model on the same held-out instances. The last line is the headline.
Targets (issue 14): SFT mean exact match >= base + 80 points, no task below 60%; DPO preference accuracy
>= 0.95; DPO exact match at most 5 points below SFT's. Issue 28: copy tasks on unseen words >= 50%.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DEFAULT_HOME = REPO / "bench" / "out" / "align-home"


@dataclass
class Aligned:
    model_uri: str
    verdict: str
    metrics: dict
    config: dict


def parse_args() -> argparse.Namespace:
    from foundry.align.instructions import TRAIN_PER_TASK

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="registered base version (default: champion of foundry-gpt, or train one)")
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME, help="FOUNDRY_HOME kept between runs")
    parser.add_argument(
        "--sft", help="a registered SFT version to evaluate and start DPO from, instead of training one"
    )
    parser.add_argument("--dpo", help="a registered DPO version to evaluate, instead of training one from the SFT")
    parser.add_argument("--train", type=int, default=TRAIN_PER_TASK, help="training instances per task (at most)")
    parser.add_argument("--test", type=int, default=100, help="held-out and out-of-vocabulary instances per task")
    parser.add_argument("--pairs", type=int, default=1000, help="training preference pairs per task")
    parser.add_argument(
        "--sft-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="overrides for the SFT run (default: none, the package defaults)",
    )
    parser.add_argument(
        "--dpo-set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="overrides for the DPO run (default: none, the package defaults)",
    )
    return parser.parse_args()


def default_base(args) -> str:
    from flows.train_pipeline import train_pipeline
    from foundry.config import load_config
    from foundry.registry import versions

    if args.base:
        return args.base
    champion = versions.champion("foundry-gpt")
    if champion is not None:
        return f"models:/foundry-gpt/{champion.version}"
    return train_pipeline(config=load_config(None)).model_uri  # the built-in defaults: params.yaml


def loaded(uri: str, home: Path, with_chat_tokens: bool = False):
    """(model, tokenizer, template) of a registered version: the template it was trained with; the base with
    the template's tokens added (grown)."""
    from tokenizers import Tokenizer

    from foundry.align.start import chat_base
    from foundry.registry.parent import fetch_version
    from models.chat import ChatTemplate, saved_template
    from models.gpt import gpt_from_saved, load_saved

    version = fetch_version(uri, home)
    if with_chat_tokens:
        version = chat_base(version, home)
    saved = load_saved(version.weights)
    return gpt_from_saved(saved), Tokenizer.from_file(version.tokenizer), saved_template(saved) or ChatTemplate()


def aligned(align, start: str, config, given: str | None, timings: dict, name: str) -> Aligned:
    """The align flow's version from `start` under `config`, or the `given` registered version (its gate verdict,
    metrics and config as the registry recorded them)."""
    if given is None:
        t = time.perf_counter()
        result = align(model_uri=start, config=config)
        timings[name] = time.perf_counter() - t
        return Aligned(result.model_uri, result.verdict, result.metrics.as_mlflow(), config.align.model_dump())
    from mlflow import MlflowClient

    name, number = given.removeprefix("models:/").split("/")  # models:/NAME/VERSION
    run = MlflowClient().get_run(MlflowClient().get_model_version(name, number).run_id)
    recorded = {k.removeprefix("align."): v for k, v in run.data.params.items() if k.startswith("align.")}
    return Aligned(given, run.data.tags.get("gate.verdict", "?"), run.data.metrics, recorded)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scores(model, tokenizer, template, sets: dict[str, list[dict]], pairs: list[dict]) -> dict:
    from foundry.align.evaluation import exact_match, pairs_from_examples, preference_scores

    out = {name: exact_match(model, tokenizer, template, examples) for name, examples in sets.items()}
    eot = tokenizer.token_to_id("<|endoftext|>")
    out["pairs"] = preference_scores(model, pairs_from_examples(pairs, tokenizer, template), 32, eot)
    by_task: dict[str, list[dict]] = {}
    for pair in pairs:
        by_task.setdefault(pair["task"], []).append(pair)
    out["pairs_by_task"] = {  # where the lost pairs are
        task: preference_scores(model, pairs_from_examples(group, tokenizer, template), 32, eot)["preference_accuracy"]
        for task, group in by_task.items()
    }
    return out


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def report(results: dict, tasks: list[str]) -> str:
    lines = ["| set | task | base | SFT | DPO |", "|---|---|---|---|---|"]
    for pool in ("test", "oov"):
        for task in [*tasks, "mean"]:
            row = [
                mean(results[m][pool].values()) if task == "mean" else results[m][pool][task]
                for m in ("base", "sft", "dpo")
            ]
            lines.append(f"| {pool} | {task} | " + " | ".join(f"{100 * v:.1f}%" for v in row) + " |")
    pairs = [results[m]["pairs"] for m in ("base", "sft", "dpo")]
    lines.append(
        "| pairs | preference accuracy | " + " | ".join(f"{p['preference_accuracy']:.3f}" for p in pairs) + " |"
    )
    lines.append("| pairs | log-prob margin | " + " | ".join(f"{p['preference_margin']:.2f}" for p in pairs) + " |")
    for task in tasks:
        row = " | ".join(f"{results[m]['pairs_by_task'][task]:.2f}" for m in ("base", "sft", "dpo"))
        lines.append(f"| pairs | preference accuracy, {task} | {row} |")
    return "\n".join(lines)


def reuse_line(args) -> str:
    """How many held-out items share their key (word set, number set, operand pair, answer) or answer with a
    training item, per task: what makes the test set held out."""
    from foundry.align.instructions import TASKS, instances, reused

    counts = {}
    for task in TASKS:
        counts |= reused(instances(task, "train", args.train, at_most=True), instances(task, "test", args.test))
    shown = ", ".join(f"{t} {c['key']}/{c['answer']}" for t, c in counts.items())
    return f"test items sharing key/answer with training (of {args.test}): {shown}"


def main() -> int:
    args = parse_args()
    os.environ["FOUNDRY_HOME"] = str(args.home)
    from foundry.runtime.env import configure_environment

    home = configure_environment()
    from flows.align import align
    from foundry.align.instructions import COPY_TASKS, TASKS, write_instruction_set
    from foundry.config import load_config

    started, load_start, timings = time.perf_counter(), os.getloadavg(), {}
    base_uri = default_base(args)
    timings["base"] = time.perf_counter() - started
    data = write_instruction_set(home / "instructions", train=args.train, test=args.test, pairs=args.pairs)

    sets = {pool: read_jsonl(data[pool]) for pool in ("test", "oov")}
    pairs = read_jsonl(data["pairs"])
    results: dict[str, dict] = {}

    def evaluate(who: str, uri: str) -> None:  # each model's figures as soon as it exists
        t = time.perf_counter()
        results[who] = scores(*loaded(uri, home, with_chat_tokens=who == "base"), sets, pairs)
        timings[f"{who} evaluation"] = time.perf_counter() - t
        print(f"{who} ({uri}): {json.dumps(results[who])}", flush=True)

    sft_config = load_config(None, [f"data.source={data['sft'].parent}", "align.method=sft", *args.sft_set])
    sft = aligned(align, base_uri, sft_config, args.sft, timings, "sft flow")
    evaluate("sft", sft.model_uri)
    dpo_config = load_config(None, [f"data.source={data['dpo'].parent}", "align.method=dpo", *args.dpo_set])
    dpo = aligned(align, sft.model_uri, dpo_config, args.dpo, timings, "dpo flow")
    evaluate("dpo", dpo.model_uri)
    evaluate("base", base_uri)
    summary = {
        "base": base_uri,
        "sft": vars(sft),
        "dpo": vars(dpo),
        "results": results,
        "timings_s": timings,
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "cores": len(os.sched_getaffinity(0)),
    }
    out = REPO / "bench" / "out" / "align-results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    print(report(results, list(TASKS)))
    for name, seconds in timings.items():
        print(f"{name}: {seconds / 60:.1f} min")
    print(
        f"load average {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f} on {summary['cores']} cores; SFT gate: {sft.verdict}"
    )
    print(f"DPO gate: {dpo.verdict}; details in {out}")
    print(reuse_line(args))
    test = {m: results[m]["test"] for m in results}
    copy_oov = mean(results["sft"]["oov"][t] for t in COPY_TASKS)
    sft_mean, base_mean, dpo_mean = (mean(test[m].values()) for m in ("sft", "base", "dpo"))
    print(
        f"align: SFT exact match {100 * sft_mean:.1f}% on held-out (base {100 * base_mean:.1f}%, "
        f"+{100 * (sft_mean - base_mean):.1f} points, lowest task {100 * min(test['sft'].values()):.1f}%); "
        f"oov {100 * mean(results['sft']['oov'].values()):.1f}% (copy tasks {100 * copy_oov:.1f}%); DPO preference accuracy "
        f"{results['sft']['pairs']['preference_accuracy']:.3f} -> {results['dpo']['pairs']['preference_accuracy']:.3f}, "
        f"exact match {100 * dpo_mean:.1f}% ({100 * (dpo_mean - sft_mean):+.1f} points vs SFT)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
