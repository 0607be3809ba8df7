"""A small instruction set, generated offline and deterministically: five format-following tasks.

- upper: "Write in capital letters: river stone" -> "RIVER STONE"
- sort:  "Sort ascending: 41, 7, 19" -> "7, 19, 41"
- add:   "Add: 12 + 30" -> "42"
- field: "Value of port in: host = cloud; port = river; user = stone" -> "river"
- snake: "Convert to snake_case: riverStoneLight" -> "river_stone_light"

Instances draw on a training vocabulary (words, keys, numbers). Each instance's prompt hash puts it in the
training pool or the held-out pool, so held-out instances are new combinations of seen words and numbers.
The out-of-vocabulary set draws on words, keys and numbers no training instance holds: what it measures is
generalisation beyond recombination. Preference pairs pair the right answer with a plausible wrong one.
`foundry instructions DIR` writes them (see `write_instruction_set`).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

TRAIN_WORDS = (
    "river stone light cloud forest paper window silver garden motion harbor lantern meadow copper "
    "thunder marble anchor pepper orbit ladder candle bridge castle desert engine falcon glacier hammer "
    "island jungle kettle lemon mirror needle ocean pillow rocket saddle tiger velvet"
).split()
OOV_WORDS = "walrus cobalt quartz zephyr bison tundra mosaic pylon sonnet waffle yonder gizmo".split()
TRAIN_KEYS = "host port user mode level name path size color owner".split()
OOV_KEYS = "realm quota badge shard".split()
TRAIN_NUMBERS = range(0, 60)  # sort
OOV_NUMBERS = range(60, 100)
TRAIN_OPERANDS = range(0, 50)  # add: sums up to 98
OOV_OPERANDS = range(50, 100)  # sums of three digits, never seen
TASKS = ("upper", "sort", "add", "field", "snake")
HELD_OUT_BUCKETS = 10  # one prompt hash bucket in ten is held out


@dataclass(frozen=True)
class Instance:
    task: str
    prompt: str
    answer: str


def _upper(rng: random.Random, words) -> Instance:
    chosen = rng.sample(words, rng.randint(2, 3))
    return Instance("upper", f"Write in capital letters: {' '.join(chosen)}", " ".join(chosen).upper())


def _sort(rng: random.Random, numbers) -> Instance:
    chosen = rng.sample(list(numbers), rng.randint(3, 4))
    return Instance("sort", f"Sort ascending: {', '.join(map(str, chosen))}", ", ".join(map(str, sorted(chosen))))


def _add(rng: random.Random, operands) -> Instance:
    a, b = rng.choice(operands), rng.choice(operands)
    return Instance("add", f"Add: {a} + {b}", str(a + b))


def _field(rng: random.Random, keys, words) -> Instance:
    chosen, values = rng.sample(keys, 3), rng.sample(words, 3)
    asked = rng.randrange(3)
    pairs = "; ".join(f"{k} = {v}" for k, v in zip(chosen, values))
    return Instance("field", f"Value of {chosen[asked]} in: {pairs}", values[asked])


def _snake(rng: random.Random, words) -> Instance:
    chosen = rng.sample(words, rng.randint(2, 3))
    camel = chosen[0] + "".join(w.capitalize() for w in chosen[1:])
    return Instance("snake", f"Convert to snake_case: {camel}", "_".join(chosen))


def _draw(task: str, rng: random.Random, oov: bool) -> Instance:
    words, keys = (OOV_WORDS, OOV_KEYS) if oov else (TRAIN_WORDS, TRAIN_KEYS)
    if task == "upper":
        return _upper(rng, words)
    if task == "sort":
        return _sort(rng, OOV_NUMBERS if oov else TRAIN_NUMBERS)
    if task == "add":
        return _add(rng, OOV_OPERANDS if oov else TRAIN_OPERANDS)
    if task == "field":
        return _field(rng, keys, words)
    return _snake(rng, words)


def held_out(instance: Instance) -> bool:
    digest = hashlib.sha256(f"{instance.task}\n{instance.prompt}".encode()).hexdigest()
    return int(digest[:8], 16) % HELD_OUT_BUCKETS == 0


def instances(task: str, pool: str, n: int, seed: int = 0, at_most: bool = False) -> list[Instance]:
    """`n` distinct instances of `task` from `pool`: train, test (held out, seen vocabulary) or oov; with
    `at_most`, fewer where the pool holds fewer (addition of two operands below 50 has 2,500 in all)."""
    if pool not in ("train", "test", "oov"):
        raise ValueError(f"pool {pool!r}: train, test or oov")
    rng = random.Random(f"{task}/{pool}/{seed}")
    found: dict[str, Instance] = {}
    for _ in range(200 * n):
        instance = _draw(task, rng, oov=pool == "oov")
        if pool == "oov" or held_out(instance) == (pool == "test"):
            found.setdefault(instance.prompt, instance)
        if len(found) == n:
            return list(found.values())
    if at_most:
        return list(found.values())
    raise ValueError(f"only {len(found)} distinct {pool} instances of {task} exist; asked for {n}")


def plausible_wrong(instance: Instance, rng: random.Random) -> str:
    """A wrong answer of the right form: what preference data pairs with the right one."""
    a = instance.answer
    if instance.task == "upper":
        words = a.split()
        i = rng.randrange(len(words))
        return " ".join(w.lower() if j == i else w for j, w in enumerate(words))
    if instance.task == "sort":
        items = a.split(", ")
        return ", ".join(items[::-1])
    if instance.task == "add":
        return str(int(a) + rng.choice((-10, -1, 1, 10)) if int(a) >= 10 else int(a) + 1)
    if instance.task == "field":
        values = [p.split(" = ")[1] for p in instance.prompt.split(": ", 1)[1].split("; ")]
        others = [v for v in values if v != a]
        return rng.choice(others)
    return a.replace("_", "")


def conversation(instance: Instance) -> list[dict]:
    return [{"role": "user", "content": instance.prompt}, {"role": "assistant", "content": instance.answer}]


def _sft_records(train: list[Instance], rng: random.Random) -> list[dict]:
    """Both record shapes, a fifth as two-exchange conversations: the template and the mask see multi-turn data."""
    records, i = [], 0
    while i < len(train):
        shape = rng.random()
        if shape < 0.2 and i + 1 < len(train):
            records.append({"messages": conversation(train[i]) + conversation(train[i + 1])})
            i += 2
            continue
        instance = train[i]
        if shape < 0.6:
            records.append({"prompt": instance.prompt, "response": instance.answer})
        else:
            records.append({"messages": conversation(instance)})
        i += 1
    return records


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def write_instruction_set(out: Path, train: int = 2000, test: int = 100, pairs: int = 1000, seed: int = 0) -> dict:
    """Per task `train` training instances (or as many as the task has), `test` held-out and `test`
    out-of-vocabulary ones, `pairs` training preference pairs (from training instances) and `test` held-out
    pairs, written as
    `sft/train.jsonl`, `dpo/train.jsonl` (what `foundry align` reads) and `eval/*.jsonl` (what it never sees)."""
    rng = random.Random(f"records/{seed}")
    by_pool = {
        pool: {task: instances(task, pool, n, seed, at_most=pool == "train") for task in TASKS}
        for pool, n in (("train", train), ("test", test), ("oov", test))
    }
    # Tasks interleaved, a task with fewer instances running out first.
    mixed = [x for group in zip_longest(*by_pool["train"].values()) for x in group if x is not None]
    preference = [
        {"prompt": x.prompt, "chosen": x.answer, "rejected": plausible_wrong(x, rng)}
        for task in TASKS
        for x in by_pool["train"][task][:pairs]
    ]
    evals = {
        pool: [{"task": x.task, "prompt": x.prompt, "answer": x.answer} for task in TASKS for x in by_pool[pool][task]]
        for pool in ("test", "oov")
    }
    held_pairs = [
        {"task": x.task, "prompt": x.prompt, "chosen": x.answer, "rejected": plausible_wrong(x, rng)}
        for task in TASKS
        for x in by_pool["test"][task]
    ]
    return {
        "sft": write_jsonl(out / "sft" / "train.jsonl", _sft_records(mixed, rng)),
        "dpo": write_jsonl(out / "dpo" / "train.jsonl", preference),
        "test": write_jsonl(out / "eval" / "test.jsonl", evals["test"]),
        "oov": write_jsonl(out / "eval" / "oov.jsonl", evals["oov"]),
        "pairs": write_jsonl(out / "eval" / "pairs.jsonl", held_pairs),
    }
