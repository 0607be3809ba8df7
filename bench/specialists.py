"""Specialists and their merges, shown: a base fine-tuned on two domains (full and LoRA), then merged by each method.

    FOUNDRY_HOME=$(mktemp -d) .venv/bin/python bench/specialists.py [--tiny] [--base models:/NAME/VERSION]

Without --base it first trains the base with the default config (`params.yaml`; `--tiny`: configs/tiny.yaml).
The two domains are corpora every machine with Python has, offline: two packages of the standard library
(default stdlib://asyncio and stdlib://importlib). Each is fine-tuned from the base with `finetune.method`
full and lora, through `flows/finetune.py`; each pair of specialists is merged by every method through
`flows/merge.py`. Prints bits per byte of every model on every holdout (the two domains' and the base's) and
the share of parameters LoRA trained; the last line is the headline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
METHODS = ("linear", "task_arithmetic", "ties", "dare_ties")


def config(base_config: Path, *overrides: str):
    from foundry.config import load_config

    return load_config(base_config, list(overrides))


def specialists(base: str, base_config: Path, domains: list[str], steps: int, rank: int) -> dict[tuple, str]:
    """{(method, domain): models:/NAME/VERSION} of the four fine-tunes."""
    from flows.finetune import finetune

    made = {}
    for method in ("full", "lora"):
        for domain in domains:
            slug = domain.rsplit("/", 1)[-1]
            overrides = [f"data.source={domain}", f"train.max_steps={steps}", f"finetune.method={method}"]
            overrides += [f"finetune.lora_rank={rank}", f"finetune.model_name=bench-{method}-{slug}"]
            if method == "lora":  # adapters start at zero and are few: a higher rate, as is usual for LoRA
                overrides.append("finetune.train.learning_rate=0.01")
            made[(method, domain)] = finetune(model=base, config=config(base_config, *overrides)).model_uri
    return made


def merges(made: dict[tuple, str], base_config: Path, domains: list[str]) -> dict[tuple, str]:
    """{(finetune method, merge method): models:/NAME/VERSION} of every merge of each pair."""
    from flows.merge import merge

    merged = {}
    for kind in ("full", "lora"):
        pair = [made[(kind, d)] for d in domains]
        for method in METHODS:
            overrides = [f"merge.method={method}", f"merge.model_name=bench-merge-{kind}-{method}"]
            merged[(kind, method)] = merge(models=pair, config=config(base_config, *overrides)).model_uri
    return merged


def score_all(models: dict[str, str], holdouts: dict[str, str], base_config: Path) -> dict[tuple, float]:
    """{(row, holdout): bits per byte} of every model on the holdout of every named model."""
    from foundry.pretrain.holdout_metrics import gate_score
    from foundry.registry import versions
    from foundry.registry.parent import data_of
    from foundry.runtime.env import foundry_home

    home, cfg = foundry_home(), config(base_config)
    dirs = {name: data_of(versions.resolve(uri), home).dir for name, uri in holdouts.items()}
    table = {}
    for row, uri in models.items():
        files = versions.download(versions.resolve(uri), home)
        for name, folder in dirs.items():
            table[(row, name)] = gate_score(files / "model.pt", files / "tokenizer.json", folder, cfg)
    return table


def lora_share(made: dict[tuple, str]) -> float:
    from foundry.registry import versions
    from foundry.runtime import tracking

    run_id = versions.resolve(next(uri for (method, _), uri in made.items() if method == "lora")).run_id
    return tracking.client().get_run(run_id).data.metrics["finetune/trainable_share"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="configs/tiny.yaml instead of params.yaml")
    parser.add_argument("--base", help="a registered base to start from (default: train one)")
    parser.add_argument("--domains", nargs=2, default=["stdlib://asyncio", "stdlib://importlib"])
    parser.add_argument("--steps", type=int, default=100, help="fine-tuning steps of each specialist")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank")
    args = parser.parse_args()
    base_config = ROOT / ("configs/tiny.yaml" if args.tiny else "params.yaml")

    from foundry.runtime.env import configure_environment

    configure_environment()
    if args.base is None:
        from flows.train_pipeline import train_pipeline

        args.base = train_pipeline(config=config(base_config, "registry.model_name=bench-base")).model_uri
    made = specialists(args.base, base_config, args.domains, args.steps, args.rank)
    merged = merges(made, base_config, args.domains)
    rows = {"base": args.base}
    rows |= {f"{m} specialist {d.rsplit('/', 1)[-1]}": uri for (m, d), uri in made.items()}
    rows |= {f"{kind} merge, {method}": uri for (kind, method), uri in merged.items()}
    holdouts = {d.rsplit("/", 1)[-1]: made[("full", d)] for d in args.domains} | {"base": args.base}
    table = score_all(rows, holdouts, base_config)

    print(f"\nbits per byte on each holdout (base {args.base}, {args.steps} fine-tuning steps)")
    print(f"{'model':36s}" + "".join(f"{h:>12s}" for h in holdouts))
    for row in rows:
        print(f"{row:36s}" + "".join(f"{table[(row, h)]:12.4f}" for h in holdouts))
    share = lora_share(made)
    a, b = list(holdouts)[:2]
    best = min(METHODS, key=lambda m: table[(f"full merge, {m}", a)] + table[(f"full merge, {m}", b)])
    print(
        f"best full merge ({best}): {table[(f'full merge, {best}', a)]:.4f} / {table[(f'full merge, {best}', b)]:.4f} "
        f"bits/byte on {a} / {b}, against the base's {table[('base', a)]:.4f} / {table[('base', b)]:.4f} and the "
        f"specialists' {table[(f'full specialist {a}', a)]:.4f} / {table[(f'full specialist {b}', b)]:.4f}; "
        f"LoRA trained {share:.1%} of the parameters"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
