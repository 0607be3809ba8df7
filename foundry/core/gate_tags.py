"""The `gate.*` tags: a gate's decision and its inputs as a registered version records them (and its verdict on
the run that made it), their keys named here once.

The keys and values stay byte for byte what versions of every earlier layout carry: `foundry lineage` and the
tests read them back. A measured input is named by the measure the gate compares (`gate.champion_bits_per_byte`,
`gate.champion_accuracy`): the functions below take that name.
"""

from __future__ import annotations

PREFIX = "gate."
VERDICT = "gate.verdict"
PASSED = "gate.passed"
PROMOTED = "gate.promoted"  # whether the version became champion (by the gate, or by a reviewer later)
CHECK = "gate.check."  # then a check's name: an alignment's checks, one tag each
CHAMPION_VERSION = "gate.champion_version"
MIN_IMPROVEMENT = "gate.min_improvement"
MAX_REGRESSION = "gate.max_regression"
MAX_GAP = "gate.max_gap"
METHOD = "gate.method"
INCUMBENT_VERSION = "gate.incumbent_version"  # a specialist's (or a merge's, an alignment's) own champion
OLD_HOLDOUT_VERSION = "gate.old_holdout_version"
OLD_HOLDOUT_REPLACES = "gate.old_holdout_replaces"  # the champion's own data, when a purge replaced it
OLD_HOLDOUT_PURGE = "gate.old_holdout_purge"


def challenger(measure: str) -> str:
    return f"gate.challenger_{measure}"


def champion(measure: str) -> str:
    return f"gate.champion_{measure}"


def challenger_old(measure: str) -> str:
    """The challenger on the champion's own holdout (the forgetting guard)."""
    return f"gate.challenger_old_{measure}"


def champion_old(measure: str) -> str:
    return f"gate.champion_old_{measure}"


def incumbent(measure: str) -> str:
    return f"gate.incumbent_{measure}"


def flag(value: bool) -> str:
    """A yes/no tag's value, as every gate tag has written it: `true` or `false`."""
    return str(value).lower()


def verdict(text: str, passed: bool) -> dict[str, str]:
    """The verdict and whether the gate passed: what the run that judged records, the head of a version's record."""
    return {VERDICT: text, PASSED: flag(passed)}
