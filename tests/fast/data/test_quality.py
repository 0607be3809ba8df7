"""foundry.data.quality: the Gopher/C4-style rules, each on crafted documents it must keep or drop."""

from __future__ import annotations

import pytest

from foundry.config import DataConfig
from foundry.data import quality
from foundry.data.quality import quality_problem

# Every rule out of the way: each case below switches on the one it is about.
BASE = dict(
    min_chars=1,
    max_chars=10_000,
    max_line_chars=10_000,
    min_alpha_fraction=0.0,
    min_mean_word_length=0,
    max_mean_word_length=1000,
    max_symbol_word_ratio=1000,
    max_repeated_line_fraction=1,
    max_non_printable_fraction=1,
)
PROSE = "the quick brown fox jumps over the lazy dog\n"


def cfg(**kw) -> DataConfig:
    return DataConfig(**{**BASE, **kw})


@pytest.mark.parametrize(
    "text, rule_kw, problem",
    [
        # mean word length: Gopher keeps 3..10 on web text; the bounds are config values
        (PROSE, dict(min_mean_word_length=3.0, max_mean_word_length=10.0), None),
        ("a b c d e f g h\n", dict(min_mean_word_length=3.0), "mean_word_length"),
        ("ab cd ef\n", dict(min_mean_word_length=2.0), None),  # exactly the bound
        ("supercalifragilistic antidisestablishment\n", dict(max_mean_word_length=10.0), "mean_word_length"),
        (" \n", dict(min_mean_word_length=0.0), None),  # no words: nothing to judge
        # symbols (#, ...) per word
        ("# a b c d\n", dict(max_symbol_word_ratio=0.2), None),  # 1 per 5 words
        ("# a b c\n", dict(max_symbol_word_ratio=0.2), "symbol_ratio"),  # 1 per 4
        ("wait... what… now\n", dict(max_symbol_word_ratio=0.5), "symbol_ratio"),  # 2 per 3
        ("#### ### #\n", dict(max_symbol_word_ratio=1.0), "symbol_ratio"),  # 8 per 3
        # repeated lines: share of non-blank lines repeating an earlier one
        ("a line\nanother\n\n\nthird\n", dict(max_repeated_line_fraction=0.0), None),
        ("same\nsame\nother\nsame\n", dict(max_repeated_line_fraction=0.5), None),  # 2 of 4
        ("same\nsame\nsame\nother\n", dict(max_repeated_line_fraction=0.4), "repeated_lines"),
        ("  x = 1\nx = 1\n", dict(max_repeated_line_fraction=0.4), "repeated_lines"),  # indentation ignored
        # non-printable characters
        (PROSE + "\x07", dict(max_non_printable_fraction=0.0), "non_printable"),
        (PROSE + "\u200b", dict(max_non_printable_fraction=0.0), "non_printable"),  # zero-width space
        (PROSE + "\x07", dict(max_non_printable_fraction=0.05), None),  # 1 of 45
        ("tabs\tand\nnewlines and café ☃ 日本\n", dict(max_non_printable_fraction=0.0), None),
    ],
)
def test_rules(text, rule_kw, problem):
    assert quality_problem(text, cfg(**rule_kw)) == problem


def test_rules_report_the_first_broken_one_cheapest_first():
    text = "# x\n# x\n# x\n"  # short words, symbols and repeats all at once
    rules = dict(min_mean_word_length=3, max_symbol_word_ratio=0.4, max_repeated_line_fraction=0.5)
    assert quality_problem(text, cfg(**rules)) == "mean_word_length"
    assert quality_problem(text, cfg(**{**rules, "min_mean_word_length": 1})) == "symbol_ratio"
    assert (
        quality_problem(text, cfg(**{**rules, "min_mean_word_length": 1, "max_symbol_word_ratio": 1}))
        == "repeated_lines"
    )


def test_letter_count_matches_isalpha():
    for text in ["abc123", "café ½ ü x²", "ǅ日本語abc", "", "\u0301e", "ΑΒΓ αβγ", "\x00\x7f"]:
        assert quality.letter_count(text) == sum(ch.isalpha() for ch in text)


def test_defaults_keep_python_source():
    """The default corpus is Python: comments, short tokens and repeated `return None` are normal."""
    code = '''"""A module docstring explaining things."""

import os
from typing import Any


# Section header
# ==============
def lookup(table: dict[str, Any], key: str) -> Any:
    """Return the value, or None."""
    if key not in table:
        return None
    value = table[key]
    if value is None:
        return None
    return value


class Thing:
    def __init__(self, x: int) -> None:
        self.x = x  # remember it

    def __repr__(self) -> str:
        return f"Thing({self.x!r})"
'''
    assert quality_problem(code, DataConfig()) is None


def test_config_rejects_inverted_word_length_bounds():
    with pytest.raises(ValueError, match="min_mean_word_length"):
        DataConfig(min_mean_word_length=5, max_mean_word_length=4)
