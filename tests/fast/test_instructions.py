"""The generated instruction set's held-out items are held out: read back from the files `foundry align` and the
bench read, no test item shares its word set, number set, operand pair (in either order) or, where the task
allows, its answer with a training item (SFT records or DPO pairs); the copy tasks' unseen words occur nowhere
else; the earlier tasks' out-of-vocabulary sets are the ones earlier benches measured."""

from __future__ import annotations

import hashlib
import json

import pytest

from foundry.align.instructions import COPY_OOV_WORDS, COPY_TASKS, TASKS, instances, reused, write_instruction_set

PREFIXES = {
    "Write in capital letters: ": "upper",
    "Sort ascending: ": "sort",
    "Add: ": "add",
    "Value of ": "field",
    "Convert to snake_case: ": "snake",
    "Repeat: ": "repeat",
    "Last word of: ": "last",
}


def task_of(prompt: str) -> str:
    return next(task for prefix, task in PREFIXES.items() if prompt.startswith(prefix))


def signature(task: str, prompt: str, answer: str):
    """What a held-out item must not share with a training item, parsed from its text alone."""
    body = prompt.split(": ", 1)[1]
    if task == "sort":
        return frozenset(body.split(", "))
    if task == "add":
        return tuple(sorted(body.split(" + ")))  # either order
    if task == "field":
        return frozenset(pair.split(" = ")[1] for pair in body.split("; "))  # the values it may copy
    if task == "snake":
        return frozenset(answer.split("_"))
    return frozenset(body.split())  # upper, repeat, last


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def trained(written: dict) -> list[tuple[str, str]]:
    """(prompt, answer) of every exchange the SFT records and the DPO pairs train on."""
    seen = [(r["prompt"], r["chosen"]) for r in read(written["dpo"])]
    for record in read(written["sft"]):
        if "prompt" in record:
            seen.append((record["prompt"], record["response"]))
            continue
        turns = record["messages"]
        seen += [(u["content"], a["content"]) for u, a in zip(turns[::2], turns[1::2])]
    return seen


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    return write_instruction_set(tmp_path_factory.mktemp("instructions"))  # the defaults: 2,000 per task


@pytest.fixture(scope="module")
def training(written) -> dict[str, dict[str, set]]:
    out: dict[str, dict[str, set]] = {task: {"signature": set(), "answer": set()} for task in TASKS}
    for prompt, answer in trained(written):
        task = task_of(prompt)
        out[task]["signature"].add(signature(task, prompt, answer))
        out[task]["answer"].add(answer)
    return out


def held(written, task: str) -> list[dict]:
    return [e for e in read(written["test"]) if e["task"] == task]


@pytest.mark.parametrize("task", TASKS)
def test_no_test_item_shares_its_words_numbers_or_operands_with_a_training_item(written, training, task):
    test = held(written, task)
    shared = [e["prompt"] for e in test if signature(task, e["prompt"], e["answer"]) in training[task]["signature"]]
    assert len(test) == 100 and shared == []


@pytest.mark.parametrize("task", [t for t in TASKS if t != "add"])  # sums of seen operands are all seen sums
def test_no_test_answer_was_a_training_answer(written, training, task):
    assert [e["answer"] for e in held(written, task) if e["answer"] in training[task]["answer"]] == []


def test_the_copy_tasks_unseen_words_occur_nowhere_else_in_the_instruction_set(written):
    elsewhere = " ".join(p + " " + a for p, a in trained(written))
    for name in ("test", "pairs", "oov"):
        elsewhere += " ".join(
            json.dumps(e) for e in read(written[name]) if not (name == "oov" and e["task"] in COPY_TASKS)
        )
    words = set(elsewhere.replace('"', " ").replace(",", " ").replace(";", " ").split())
    copy_oov = [e for e in read(written["oov"]) if e["task"] in COPY_TASKS]
    used = {w for e in copy_oov for w in e["prompt"].split(": ", 1)[1].split()}
    assert len(copy_oov) == 100 * len(COPY_TASKS) and used <= set(COPY_OOV_WORDS) and not used & words


def test_the_earlier_tasks_oov_sets_are_the_ones_earlier_benches_measured():
    rows = [json.dumps([x.task, x.prompt, x.answer]) for t in TASKS[:5] for x in instances(t, "oov", 100)]
    digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    assert digest == "c69e0287ff55f29d1b889211c86494523b972f42d2a0bcd4d650d57a95012270"  # before issue 28


def test_the_bench_measure_of_reuse_finds_only_adds_sums():
    counts = {}
    for task in TASKS:
        counts |= reused(instances(task, "train", 2000, at_most=True), instances(task, "test", 100))
    assert {t: c for t, c in counts.items() if c != {"key": 0, "answer": 0}} == {"add": {"key": 0, "answer": 100}}
