"""A small instruction set, generated offline and deterministically: seven format-following tasks.

- upper:  "Write in capital letters: river stone" -> "RIVER STONE"
- sort:   "Sort ascending: 41, 7, 19" -> "7, 19, 41"
- add:    "Add: 12 + 30" -> "42"  (or "What is 12 + 30?", "12 + 30 =", "Sum of 12 and 30:")
- field:  "Value of port in: host = cloud; port = river; user = stone" -> "river"
- snake:  "Convert to snake_case: riverStoneLight" -> "river_stone_light"
- repeat: "Repeat: river stone light" -> "river stone light"  (one to five words)
- last:   "Last word of: river stone light" -> "light"  (two to five words)

Instances draw on a training vocabulary (words, keys, numbers). What decides an instance's pool is what would let
a model answer a held-out item from memory: its word set (upper, snake, repeat), its number set (sort), its operand
pair in either order (add), its answer (field, last: a few answer words are held out, and training items of those
tasks never show them). One hash bucket of those in ten is held out, so no test item is a training item reordered,
and no field or last-word answer was ever a training answer. Sums cannot be held out without withholding the
numbers themselves: an `add` answer can be a training sum, never its operands.
The copy tasks' training instances copy generated strings instead (`copy_pool`, made from the seed: pronounceable
words, snake_case, camelCase, abbreviations, words with digits), none of them another task's word or containing an
out-of-vocabulary word, so many that each recurs in a few instances at most: too few to learn the words instead of
the copying. Their held-out items copy the training vocabulary's words, which their training items never show.
The out-of-vocabulary set draws on words, keys and numbers no training instance holds; the copy tasks' (repeat,
last) on words that occur nowhere else in the instruction set: what it measures is the skill, not the list.
Preference pairs pair the right answer with a plausible wrong one.
`foundry instructions DIR` writes them (see `write_instruction_set`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from itertools import zip_longest
from pathlib import Path

TRAIN_WORDS = (
    "river stone light cloud forest paper window silver garden motion harbor lantern meadow copper "
    "thunder marble anchor pepper orbit ladder candle bridge castle desert engine falcon glacier hammer "
    "island jungle kettle lemon mirror needle ocean pillow rocket saddle tiger velvet"
).split()
# Answers of the answer-held tasks (field, last) on test only; their training items never show these words.
HELD_ANSWERS = frozenset("lantern meadow falcon glacier kettle needle saddle velvet".split())
OOV_WORDS = "walrus cobalt quartz zephyr bison tundra mosaic pylon sonnet waffle yonder gizmo".split()
# The copy tasks' unseen words, in no other instance: plain words and identifiers of the shapes code holds.
COPY_OOV_WORDS = "kraken lupine gimbal scarab vellum zither argv tmpdir kwargs getattr bufsize hexdigest".split()
TRAIN_KEYS = "host port user mode level name path size color owner".split()
OOV_KEYS = "realm quota badge shard".split()
TRAIN_NUMBERS = range(0, 60)  # sort
OOV_NUMBERS = range(60, 100)
TRAIN_OPERANDS = range(0, 50)  # add: sums up to 98
OOV_OPERANDS = range(50, 100)  # sums of three digits, never seen
# One question, four ways to ask it: four times the distinct items of 2,500 operand pairs (bench/README.md).
ADD_PHRASINGS = ("Add: {a} + {b}", "What is {a} + {b}?", "{a} + {b} =", "Sum of {a} and {b}:")
TASKS = ("upper", "sort", "add", "field", "snake", "repeat", "last")
COPY_TASKS = ("repeat", "last")  # the answer copies words of the prompt
ANSWER_HELD = ("field", "last")  # held out by answer: the answer is one word of the prompt
HELD_OUT_BUCKETS = 10  # one key hash bucket in ten is held out
TRAIN_PER_TASK = 8000  # `foundry instructions` and bench/align.py: the set the package defaults were measured on
COPY_POOL_SIZE = 20_000  # the 8,000 instances per copy task use each word a few times
_ONSETS = "b d f g h j k l m n p r s t v w z br ch dr fl gr kl pl sh st tr".split()
_VOWELS = "a e i o u a e i o u ai ea oo".split()
_CODAS = ("", "", "", "", "n", "r", "l", "s", "x", "m", "t", "k")
_CONSONANTS = "bcdfghjklmnprstvwxz"
_UNSEEN = (*OOV_WORDS, *OOV_KEYS, *COPY_OOV_WORDS)  # no generated word contains one
_TAKEN = frozenset((*TRAIN_WORDS, *TRAIN_KEYS, *_UNSEEN))  # every other task's words


@dataclass(frozen=True)
class Instance:
    task: str
    prompt: str
    answer: str
    key: str = ""  # what a held-out instance shares with no training one (`held_out`)


def _words_key(words) -> str:
    return " ".join(sorted(words))


def _upper(rng: random.Random, words) -> Instance:
    chosen = rng.sample(words, rng.randint(2, 3))
    text = " ".join(chosen)
    return Instance("upper", f"Write in capital letters: {text}", text.upper(), _words_key(chosen))


def _sort(rng: random.Random, numbers) -> Instance:
    chosen = rng.sample(list(numbers), rng.randint(3, 4))
    answer = ", ".join(map(str, sorted(chosen)))
    return Instance("sort", f"Sort ascending: {', '.join(map(str, chosen))}", answer, answer)


def _add(rng: random.Random, operands) -> Instance:
    a, b = rng.choice(operands), rng.choice(operands)
    prompt = rng.choice(ADD_PHRASINGS).format(a=a, b=b)
    return Instance("add", prompt, str(a + b), f"{min(a, b)} + {max(a, b)}")


def _field(rng: random.Random, keys, words) -> Instance:
    chosen, values = rng.sample(keys, 3), rng.sample(words, 3)
    asked = rng.randrange(3)
    pairs = "; ".join(f"{k} = {v}" for k, v in zip(chosen, values))
    return Instance("field", f"Value of {chosen[asked]} in: {pairs}", values[asked], values[asked])


def _snake(rng: random.Random, words) -> Instance:
    chosen = rng.sample(words, rng.randint(2, 3))
    camel = chosen[0] + "".join(w.capitalize() for w in chosen[1:])
    return Instance("snake", f"Convert to snake_case: {camel}", "_".join(chosen), _words_key(chosen))


def _repeat(rng: random.Random, words) -> Instance:
    chosen = rng.sample(words, rng.randint(1, 5))
    text = " ".join(chosen)
    return Instance("repeat", f"Repeat: {text}", text, _words_key(chosen))


def _last(rng: random.Random, words) -> Instance:
    chosen = rng.sample(words, rng.randint(2, 5))  # two at least: the last word is a choice
    return Instance("last", f"Last word of: {' '.join(chosen)}", chosen[-1], chosen[-1])


def _pronounceable(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))


def _abbreviation(rng: random.Random) -> str:
    """buf, ctx: three letters around a vowel, or two to four consonants."""
    if rng.random() < 0.5:
        return rng.choice(_CONSONANTS) + rng.choice("aeiou") + rng.choice(_CONSONANTS)
    return "".join(rng.choice(_CONSONANTS) for _ in range(rng.randint(2, 4)))


def _part(rng: random.Random) -> str:
    """One part of an identifier: a short word or an abbreviation."""
    return _pronounceable(rng, 1) if rng.random() < 0.6 else _abbreviation(rng)


def _generated_word(rng: random.Random) -> str:
    """A word in one of the shapes code holds: kelbora, tra_min, parseKel, xkr, vend2 (a fifth each)."""
    shape = rng.randrange(5)
    if shape == 0:
        return _pronounceable(rng, rng.randint(1, 3))
    if shape == 1:
        return "_".join(_part(rng) for _ in range(2))
    if shape == 2:
        first, second = _part(rng), _part(rng)
        return first + second.capitalize()
    if shape == 3:
        return _abbreviation(rng)
    return _part(rng) + str(rng.randrange(1, 100))


def _allowed_in_pool(word: str) -> bool:
    """Another task's word never; a word containing an out-of-vocabulary word (`tmp_dir`, `walrus7`) neither, so
    those stay unseen; at most 10 characters, so that a five-word item and its reply stay short."""
    flat = word.lower().replace("_", "")
    return len(word) <= 10 and flat not in _TAKEN and not any(u in flat for u in _UNSEEN)


@lru_cache(maxsize=4)
def copy_pool(seed: int = 0) -> tuple[str, ...]:
    """`COPY_POOL_SIZE` distinct generated words, the same for a seed: what the copy tasks' training items copy."""
    rng, found = random.Random(f"copy-pool/{seed}"), {}  # a dict, not a set: its order is the draws'
    while len(found) < COPY_POOL_SIZE:
        word = _generated_word(rng)
        if _allowed_in_pool(word):
            found.setdefault(word, None)
    return tuple(found)


def _vocabulary(task: str, pool: str, seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(words, keys) a pool draws on: the copy tasks' training items copy generated words, the training items of
    the answer-held tasks never show a held-out answer."""
    if pool == "oov":
        return tuple(COPY_OOV_WORDS if task in COPY_TASKS else OOV_WORDS), tuple(OOV_KEYS)
    if pool == "train" and task in COPY_TASKS:
        return copy_pool(seed), tuple(TRAIN_KEYS)
    if pool == "train" and task in ANSWER_HELD:
        return tuple(w for w in TRAIN_WORDS if w not in HELD_ANSWERS), tuple(TRAIN_KEYS)
    return tuple(TRAIN_WORDS), tuple(TRAIN_KEYS)


def _draw(task: str, rng: random.Random, pool: str, words: tuple[str, ...], keys: tuple[str, ...]) -> Instance:
    oov = pool == "oov"
    if task == "upper":
        return _upper(rng, words)
    if task == "sort":
        return _sort(rng, OOV_NUMBERS if oov else TRAIN_NUMBERS)
    if task == "add":
        return _add(rng, OOV_OPERANDS if oov else TRAIN_OPERANDS)
    if task == "field":
        return _field(rng, keys, words)
    if task == "repeat":
        return _repeat(rng, words)
    if task == "last":
        return _last(rng, words)
    return _snake(rng, words)


def held_out(instance: Instance) -> bool:
    """Whether an instance belongs to the held-out pool: by its answer for the answer-held tasks, else by a
    hash of its key, so every ordering of the same words or operands falls on the same side."""
    if instance.task in ANSWER_HELD:
        return instance.answer in HELD_ANSWERS
    digest = hashlib.sha256(f"{instance.task}\n{instance.key}".encode()).hexdigest()
    return int(digest[:8], 16) % HELD_OUT_BUCKETS == 0


def instances(task: str, pool: str, n: int, seed: int = 0, at_most: bool = False) -> list[Instance]:
    """`n` distinct instances of `task` from `pool`: train, test (held out, seen vocabulary) or oov; with
    `at_most`, fewer where the pool holds fewer (addition of two operands below 50 has 2,500 pairs, each asked four ways)."""
    if pool not in ("train", "test", "oov"):
        raise ValueError(f"pool {pool!r}: train, test or oov")
    rng, (words, keys) = random.Random(f"{task}/{pool}/{seed}"), _vocabulary(task, pool, seed)
    found: dict[str, Instance] = {}
    for _ in range(200 * n):
        instance = _draw(task, rng, pool, words, keys)
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
    if instance.task == "repeat":  # the words reversed, or a lone word cut short
        return " ".join(a.split()[::-1]) if " " in a else a[:-1]
    if instance.task == "last":
        return instance.prompt.split(": ", 1)[1].split()[0]
    return a.replace("_", "")


def reused(train: list[Instance], test: list[Instance]) -> dict[str, dict[str, int]]:
    """Per task, the test instances that share their key (word set, number set, operand pair or answer) with a
    training instance, and those that share their answer: 0, but for add's sums."""
    keys, answers = defaultdict(set), defaultdict(set)
    for x in train:
        keys[x.task].add(x.key)
        answers[x.task].add(x.answer)
    counts: dict[str, dict[str, int]] = {}
    for x in test:
        count = counts.setdefault(x.task, {"key": 0, "answer": 0})
        count["key"] += x.key in keys[x.task]
        count["answer"] += x.answer in answers[x.task]
    return counts


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


def write_instruction_set(
    out: Path, train: int = TRAIN_PER_TASK, test: int = 100, pairs: int = 1000, seed: int = 0
) -> dict:
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
