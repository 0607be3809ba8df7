"""foundry.pretrain.clean: normalising, quality rules, de-duplication, the split and bad input."""

from __future__ import annotations

import csv
import hashlib
import json
import random
from pathlib import Path

import pytest
from synthetic import WORDS

from foundry.config import DataConfig
from foundry.core.contracts import SourceFile
from foundry.pretrain.clean import BadInputError, clean_documents, holdout_set, iter_texts, normalise, quality_problem

# Small thresholds so crafted documents stay short; the Gopher-style rules have their own tests
# (tests/fast/data/test_quality.py) and are relaxed here so each case below tests one rule.
RULES = dict(
    min_chars=20,
    max_chars=200,
    max_line_chars=60,
    min_alpha_fraction=0.5,
    max_mean_word_length=100,
    max_repeated_line_fraction=1,
)


def doc(i: int, words: int = 9) -> str:
    """A distinct (not even nearly a duplicate of another), clean, letter-rich document of a few lines."""
    rng = random.Random(i)
    body = "\n".join(" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(words // 3))
    return f"document number {i} says\n{body}\nand ends {i}\n"


def entries_for(paths: list[Path]) -> list[SourceFile]:
    return [SourceFile(path=str(p), name=p.name, size=0, sha256="") for p in paths]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# --- normalise -------------------------------------------------------------------------------


def test_normalise_nfc():
    assert normalise("cafe\u0301") == "caf\u00e9\n"


def test_normalise_newlines():
    assert normalise("a\r\nb\rc\nd") == "a\nb\nc\nd\n"


def test_normalise_trailing_whitespace_and_blank_edges():
    assert normalise("\n\n  a  \t\nb \n\n\n") == "  a\nb\n"


def test_normalise_is_idempotent():
    text = "x \r\n\u0065\u0301 \n\n"
    assert normalise(normalise(text)) == normalise(text)


# --- quality rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, problem",
    [
        ("short text\n", "too_short"),
        ("a" * 19, "too_short"),
        ("a" * 20, None),  # exactly min_chars
        (("abcdefghi\n" * 20), None),  # exactly max_chars
        (("abcdefghi\n" * 20) + "x", "too_long"),
        ("a" * 61 + "\n", "long_line"),
        ("a" * 60 + "\n", None),  # exactly max_line_chars
        ("1234 5678 9012 3456 7890\n", "low_alpha"),
        ("abcdefghij0123456789", None),  # exactly half letters
        ("abcdefghi01234567890", "low_alpha"),  # just under half
        ("12 34\n", "too_short"),  # first rule broken wins
    ],
)
def test_quality_rules(text, problem):
    assert quality_problem(text, DataConfig(**RULES)) == problem


# --- holdout split ---------------------------------------------------------------------------


def test_holdout_set_takes_smallest_hashes_until_the_fraction_of_bytes():
    docs = [("a" * 64, 10), ("b" * 64, 30), ("c" * 64, 60), ("0" * 64, 5)]
    assert holdout_set(docs, 0.04) == {"0" * 64}  # 5 of 105 bytes >= 4.2
    assert holdout_set(docs, 0.05) == {"0" * 64, "a" * 64}  # 5 < 5.25: one more
    assert holdout_set(docs, 0.49) == {"0" * 64, "a" * 64, "b" * 64}


def test_holdout_set_never_takes_the_last_document():
    assert holdout_set([("a" * 64, 100)], 0.2) == set()
    assert holdout_set([("a" * 64, 1), ("b" * 64, 100)], 0.4) == {"a" * 64}


def test_holdout_set_guarantees_the_fraction_and_is_content_addressed():
    rng = random.Random(0)
    docs = [(hashlib.sha256(str(i).encode()).hexdigest(), rng.randint(100, 50_000)) for i in range(300)]
    for fraction in (0.01, 0.05, 0.2, 0.45):
        chosen = holdout_set(docs, fraction)
        held = sum(size for sha, size in docs if sha in chosen)
        biggest = max(size for _, size in docs)
        assert fraction * sum(s for _, s in docs) <= held < fraction * sum(s for _, s in docs) + biggest
        assert holdout_set(list(reversed(docs)), fraction) == chosen  # order of arrival does not matter


# --- clean_documents -------------------------------------------------------------------------


@pytest.fixture
def bad_inputs(tmp_path) -> list[Path]:
    src = tmp_path / "src"
    src.mkdir()
    files = {
        "empty.txt": b"  \n\t\n",
        "binary.txt": b"abc\x00def" * 10,
        "latin1.txt": "caf\u00e9 ".encode("latin-1") * 20,
        "good.txt": doc(1).encode(),
    }
    for name, data in files.items():
        (src / name).write_bytes(data)
    lines = [
        json.dumps({"text": doc(2)}),
        "{not json",
        json.dumps({"body": doc(3)}),
        json.dumps({"text": 42}),
        "",
        json.dumps({"text": doc(4)}),
    ]
    (src / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    return [src / n for n in (*files, "mixed.jsonl")]


def test_skip_counts_each_kind_of_bad_input(tmp_path, bad_inputs):
    stats = clean_documents(entries_for(bad_inputs), DataConfig(**RULES), tmp_path / "out", progress=False)
    assert dict(stats.dropped) == {"empty_file": 1, "binary": 1, "invalid_utf8": 1, "malformed_jsonl": 3}
    assert stats.docs_in == 3 and stats.docs_out == 3
    metrics = stats.as_metrics()
    assert metrics["dropped_malformed_jsonl"] == 3 and metrics["docs_out"] == 3
    texts = [*iter_texts(tmp_path / "out" / "train.jsonl"), *iter_texts(tmp_path / "out" / "holdout.jsonl")]
    assert sorted(texts) == sorted(normalise(doc(i)) for i in (1, 2, 4))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("empty.txt", "empty.txt: empty file"),
        ("binary.txt", "binary.txt: binary"),
        ("latin1.txt", "latin1.txt: invalid utf8"),
        ("mixed.jsonl", "mixed.jsonl:2: malformed jsonl"),
    ],
)
def test_fail_raises_naming_the_file(tmp_path, bad_inputs, name, expected):
    path = next(p for p in bad_inputs if p.name == name)
    cfg = DataConfig(**RULES, on_error="fail")
    with pytest.raises(BadInputError) as info:
        clean_documents(entries_for([path]), cfg, tmp_path / "out", progress=False)
    assert str(info.value).startswith(expected)
    assert "data.on_error=skip" in str(info.value)


def test_fail_accepts_good_input(tmp_path, bad_inputs):
    good = [p for p in bad_inputs if p.name == "good.txt"]
    stats = clean_documents(entries_for(good), DataConfig(**RULES, on_error="fail"), tmp_path / "out", progress=False)
    assert stats.docs_out == 1 and not stats.dropped


def test_jsonl_text_field_is_configurable(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"body": doc(7), "text": "ignored"}) + "\n" + json.dumps({"text": doc(8)}) + "\n")
    stats = clean_documents(
        entries_for([path]), DataConfig(**RULES, jsonl_text_field="body"), tmp_path / "out", progress=False
    )
    assert stats.docs_out == 1 and stats.dropped["malformed_jsonl"] == 1
    rows = read_jsonl(tmp_path / "out" / "train.jsonl") + read_jsonl(tmp_path / "out" / "holdout.jsonl")
    assert rows == [{"text": normalise(doc(7)), "source": "records.jsonl"}]


def test_jsonl_with_unicode_line_separator_inside_a_string(tmp_path):
    path = tmp_path / "records.jsonl"
    text = doc(9).replace("says", "says\u2028")
    path.write_text(json.dumps({"text": text}, ensure_ascii=False) + "\n", encoding="utf-8")
    stats = clean_documents(entries_for([path]), DataConfig(**RULES), tmp_path / "out", progress=False)
    assert not stats.dropped
    assert stats.docs_out == 1


def test_quality_drops_are_counted(tmp_path):
    texts = {
        "ok.txt": doc(1),
        "short.txt": "tiny\n",
        "long.txt": ("word " * 11 + "\n") * 5,
        "line.txt": "x" * 80 + "\n",
        "digits.txt": "0123456789 " * 4 + "\n",
    }
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    stats = clean_documents(
        entries_for([tmp_path / n for n in texts]), DataConfig(**RULES), tmp_path / "out", progress=False
    )
    assert dict(stats.dropped) == {"too_short": 1, "too_long": 1, "long_line": 1, "low_alpha": 1}
    assert stats.docs_in == 5 and stats.docs_out == 1


def test_exact_duplicates_after_normalising_are_dropped(tmp_path):
    (tmp_path / "a.txt").write_text(doc(1))
    (tmp_path / "b.txt").write_bytes(doc(1).replace("\n", "  \r\n").encode())  # same after normalise
    (tmp_path / "c.txt").write_text(doc(1))
    (tmp_path / "d.txt").write_text(doc(2))
    paths = [tmp_path / n for n in ("a.txt", "b.txt", "c.txt", "d.txt")]
    stats = clean_documents(entries_for(paths), DataConfig(**RULES), tmp_path / "out", progress=False)
    assert stats.dropped["exact_duplicate"] == 2
    assert stats.docs_out == 2
    rows = read_csv(tmp_path / "out" / "documents.csv")
    assert sorted(r["source"] for r in rows) == ["a.txt", "d.txt"]  # first copy wins


@pytest.fixture
def cleaned(tmp_path):
    paths = []
    for i in range(60):
        path = tmp_path / "src" / f"doc{i:02d}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(doc(i))
        paths.append(path)
    out = tmp_path / "out"
    stats = clean_documents(entries_for(paths), DataConfig(**RULES, holdout_fraction=0.3), out, progress=False)
    return out, stats


def test_documents_csv_rows_match_kept_documents(cleaned):
    out, stats = cleaned
    rows = read_csv(out / "documents.csv")
    assert list(rows[0]) == ["sha256", "split", "chars", "bytes", "source"]
    assert len(rows) == stats.docs_out == 60
    kept = {
        split: {hashlib.sha256(r["text"].encode()).hexdigest(): r for r in read_jsonl(out / f"{split}.jsonl")}
        for split in ("train", "holdout")
    }
    for row in rows:
        record = kept[row["split"]][row["sha256"]]
        assert int(row["chars"]) == len(record["text"])
        assert int(row["bytes"]) == len(record["text"].encode())
        assert row["source"] == record["source"]
    assert stats.split_docs["train"] == len(kept["train"]) and stats.split_docs["holdout"] == len(kept["holdout"])
    assert stats.split_bytes["holdout"] == sum(int(r["bytes"]) for r in rows if r["split"] == "holdout")


def test_train_and_holdout_are_disjoint_and_split_by_content(cleaned):
    out, stats = cleaned
    train = set(iter_texts(out / "train.jsonl"))
    holdout = set(iter_texts(out / "holdout.jsonl"))
    assert train and holdout
    assert not train & holdout
    assert len(train) + len(holdout) == stats.docs_out
    digests = lambda texts: {hashlib.sha256(t.encode()).hexdigest() for t in texts}  # noqa: E731
    assert max(digests(holdout)) < min(digests(train))  # the holdout is the smallest hashes
    assert stats.split_bytes["holdout"] >= 0.3 * (stats.split_bytes["holdout"] + stats.split_bytes["train"])


def test_clean_is_deterministic(cleaned, tmp_path):
    out, _ = cleaned
    paths = sorted((tmp_path / "src").iterdir())
    clean_documents(entries_for(paths), DataConfig(**RULES, holdout_fraction=0.3), tmp_path / "again", progress=False)
    for name in ("train.jsonl", "holdout.jsonl", "documents.csv"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes()


def test_documents_csv_source_round_trips_awkward_names(tmp_path):
    path = tmp_path / 'caf\u00e9, "draft".txt'
    path.write_text(doc(1))
    clean_documents(entries_for([path]), DataConfig(**RULES), tmp_path / "out", progress=False)
    rows = read_csv(tmp_path / "out" / "documents.csv")
    assert [r["source"] for r in rows] == [path.name]
