"""Sticky splits for chat and preference records: the ledger in `$FOUNDRY_HOME/ledgers/align/` keeps every
prompt in its split as the instruction set grows and changes, for SFT and DPO alike, and changes only when a
data version was made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundry.align import split_ledger
from foundry.align.prepare import prepare_aligned
from foundry.align.records import Conversation
from foundry.config import load_config
from foundry.data.acquire import acquire_source
from foundry.data.formats import BadInputError
from foundry.data.manifest import DatasetManifest


def sft(numbers, reply=lambda n: str(n + 1), system: str | None = None) -> list[dict]:
    return [
        {"prompt": f"Add: {n} + 1", "response": reply(n), **({"system": system} if system else {})} for n in numbers
    ]


def dpo(numbers) -> list[dict]:
    return [{"prompt": f"Add: {n} + 1", "chosen": str(n + 1), "rejected": str(n + 2)} for n in numbers]


def prepare(tmp_path: Path, name: str, records: list, tokenizer: Path, ledger: Path | None, *extra: str) -> Path:
    source = tmp_path / f"{name}-src"
    source.mkdir()
    (source / "records.jsonl").write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))
    method = "dpo" if "chosen" in records[0] else "sft"
    settings = [f"data.source={source}", f"align.method={method}", f"tokenizer.from_file={tokenizer}", *extra]
    config = load_config(None, [*settings, "model.block_size=48", "data.holdout_fraction=0.3"])
    out = tmp_path / name
    prepare_aligned(acquire_source(config.data, tmp_path / f"{name}.json"), config, out, ledger=ledger)
    return out


def version(home: Path, tmp_path: Path, name: str, records: list, tokenizer: Path) -> Path:
    """What the align flow's data task does: prepare on the ledger, held, then add the version's prompts."""
    with split_ledger.locked(home) as ledger:
        out = prepare(tmp_path, name, records, tokenizer, ledger)
        split_ledger.extend(home, list(split_ledger.kept_records(out)), name)
    return out


def splits(data_dir: Path) -> dict[str, str]:
    """{prompt identity: split}; every record of one prompt has the same split, or this fails."""
    found: dict[str, set[str]] = {}
    for key, split, _ in split_ledger.kept_records(data_dir):
        found.setdefault(key, set()).add(split)
    assert all(len(s) == 1 for s in found.values())
    return {key: s.pop() for key, s in found.items()}


def store_bytes(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def test_a_growing_and_changing_instruction_set_never_moves_a_prompt_between_splits(chat_tokenizer, tmp_path):
    home = tmp_path / "home"
    v1 = version(home, tmp_path, "v1", sft(range(30)), chat_tokenizer)
    # Every reply changed and a system turn added, 30 new prompts; then 5 old prompts leave and 20 arrive.
    v2 = version(
        home, tmp_path, "v2", sft(range(40), lambda n: f"{n + 1}.", "Be brief.") + sft(range(40, 60)), chat_tokenizer
    )
    v3 = version(home, tmp_path, "v3", sft(range(5, 80)), chat_tokenizer)
    s1, s2, s3 = splits(v1), splits(v2), splits(v3)
    assert set(s1.values()) == {"train", "holdout"}
    for before, after in ((s1, s2), (s1, s3), (s2, s3)):
        assert all(after[key] == split for key, split in before.items() if key in after)
    assert "holdout" in {s3[key] for key in set(s3) - set(s2)}  # new prompts get their own holdout share
    ledger = split_ledger.read(split_ledger.head(home))
    assert len(ledger) == 80 and ledger.names[0].startswith("v1:records.jsonl:")
    # The fault it guards against: the grown set split afresh moves prompts.
    fresh = splits(prepare(tmp_path, "fresh", sft(range(5, 80)), chat_tokenizer, None))
    assert any(fresh[key] != split for key, split in s1.items() if key in fresh)


def test_sft_and_dpo_share_the_ledger_so_a_held_out_prompt_is_held_out_for_both(chat_tokenizer, tmp_path):
    home = tmp_path / "home"
    chat = splits(version(home, tmp_path, "sft", sft(range(40)), chat_tokenizer))
    pairs = splits(version(home, tmp_path, "dpo", dpo(range(0, 40, 2)) + dpo(range(0, 40, 2))[:3], chat_tokenizer))
    assert pairs and all(pairs[key] == chat[key] for key in pairs)


def test_preparing_only_reads_the_ledger_and_a_failure_leaves_it_as_it_was(chat_tokenizer, tmp_path):
    home = tmp_path / "home"
    version(home, tmp_path, "v1", sft(range(30)), chat_tokenizer)
    before = store_bytes(home)
    bad = [*sft(range(30, 40)), '{"prompt": "Add: 1 + 1", "completion": ["2"]}\n']
    with split_ledger.locked(home) as ledger, pytest.raises(BadInputError, match="records.jsonl:11: malformed record"):
        prepare(tmp_path, "bad", bad, chat_tokenizer, ledger, "data.on_error=fail")
    prepare(tmp_path, "good", sft(range(30, 40)), chat_tokenizer, split_ledger.head(home))
    assert store_bytes(home) == before


def test_the_same_records_on_the_same_ledger_are_the_same_data(chat_tokenizer, tmp_path):
    home = tmp_path / "home"
    records = sft(range(30))
    v1 = version(home, tmp_path, "v1", records, chat_tokenizer)
    head = split_ledger.head(home)
    again = version(home, tmp_path, "again", records, chat_tokenizer)  # on the ledger they grew
    assert DatasetManifest.read(again).files == DatasetManifest.read(v1).files  # every file, byte for byte
    assert split_ledger.head(home) == head  # nothing new: the same generation, the same cache key
    version(home, tmp_path, "grown", sft(range(30, 40)), chat_tokenizer)
    assert split_ledger.digest(home) != head.name and len(split_ledger.read(split_ledger.head(home))) == 40


def test_records_whose_prompts_are_all_held_out_are_refused_with_the_reason(chat_tokenizer, tmp_path):
    home = tmp_path / "home"
    s1 = splits(version(home, tmp_path, "v1", sft(range(30)), chat_tokenizer))
    asked = {n: split_ledger.identity(Conversation((("user", f"Add: {n} + 1"),))) for n in range(30)}
    numbers = [n for n in range(30) if s1[asked[n]] == "holdout"]
    with pytest.raises(ValueError, match=f"{len(numbers)} distinct prompts, all given to holdout"):
        prepare(tmp_path, "only-held", sft(numbers, lambda n: "a new reply"), chat_tokenizer, split_ledger.head(home))
