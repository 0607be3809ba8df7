"""Document quality rules in the style of Gopher (Rae et al., 2021) and C4 (Raffel et al., 2020).

Each rule has a threshold in `DataConfig`; `quality_problem` names the first rule a document
breaks. The published thresholds were set for English web text; the defaults here are set so the
default corpus (Python source, where `#` comments, short tokens and repeated lines such as
`return None` are normal) keeps nearly every file, while boilerplate, tables and binary-ish text go.
"""

from __future__ import annotations

import re

from foundry.config import DataConfig

# Gopher's "symbols": the hash sign and the ellipsis, which mark lists and truncated web text.
_SYMBOLS = re.compile(r"#|\.\.\.|…")
# C0/C1 control characters except tab and newline, zero-width and direction marks, the BOM,
# private use and lone surrogates: characters that print as nothing or as garbage.
_NON_PRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ue000-\uf8ff\ud800-\udfff]"
)

RULES = (
    "too_short",
    "too_long",
    "long_line",
    "low_alpha",
    "mean_word_length",
    "symbol_ratio",
    "repeated_lines",
    "non_printable",
)


_ASCII_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")


def letter_count(text: str) -> int:
    """`sum(ch.isalpha() for ch in text)`, ten times faster: ASCII letters are counted in C and only
    the non-ASCII characters (few, in practice) one by one."""
    ascii_only = text.encode("ascii", "ignore")
    count = len(ascii_only) - len(ascii_only.translate(None, _ASCII_LETTERS))
    if len(ascii_only) != len(text):
        count += sum(ch.isalpha() for ch in _ASCII_RUNS.sub("", text))
    return count


def mean_word_length(words: list[str]) -> float:
    return sum(map(len, words)) / len(words) if words else 0.0


def symbol_word_ratio(text: str, words: list[str]) -> float:
    return len(_SYMBOLS.findall(text)) / max(len(words), 1)


def repeated_line_fraction(text: str) -> float:
    """Share of non-blank lines that repeat an earlier line (compared without surrounding spaces)."""
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]
    return 1 - len(set(lines)) / len(lines) if lines else 0.0


def non_printable_fraction(text: str) -> float:
    return len(_NON_PRINTABLE.findall(text)) / max(len(text), 1)


def quality_problem(text: str, cfg: DataConfig) -> str | None:
    """The name of the first quality rule the document breaks, or None. Cheapest rules first."""
    if len(text) < cfg.min_chars:
        return "too_short"
    if len(text) > cfg.max_chars:
        return "too_long"
    if max(map(len, text.split("\n"))) > cfg.max_line_chars:
        return "long_line"
    if letter_count(text) < cfg.min_alpha_fraction * len(text):
        return "low_alpha"
    words = text.split()
    if not cfg.min_mean_word_length <= mean_word_length(words) <= cfg.max_mean_word_length:
        return "mean_word_length"
    if symbol_word_ratio(text, words) > cfg.max_symbol_word_ratio:
        return "symbol_ratio"
    if repeated_line_fraction(text) > cfg.max_repeated_line_fraction:
        return "repeated_lines"
    if non_printable_fraction(text) > cfg.max_non_printable_fraction:
        return "non_printable"
    return None
