"""models/merge.py: each method against results worked out by hand on small tensors, and the refusals."""

from __future__ import annotations

import hashlib

import pytest
import torch
from helpers_merge import merge_score

from models.gpt import GPT, GPTConfig
from models.merge import Mergeable, MergeRefused, check_mergeable, merge


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def states(*vectors: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    return [{"w": v} for v in vectors]


BASE = t(1, 1, 1, 1)
# Task vectors chosen so that signs conflict: entry 3 is +4 in one model and -3 in another.
TAUS = (t(2, -1, 0.5, -3), t(-1, -2, 0.1, 4), t(1.5, 0.5, -0.2, 1))


def specialists() -> list[dict[str, torch.Tensor]]:
    return states(*(BASE + tau for tau in TAUS))


def test_linear_is_the_weighted_average():
    merged = merge("linear", states(t(1, 2), t(3, 6)), base=None, weights=[1, 3])
    torch.testing.assert_close(merged["w"], t((1 + 9) / 4, (2 + 18) / 4))


def test_task_arithmetic_adds_scaled_task_vectors_to_the_base():
    base, a, b = states(t(0, 0, 1), t(1, 0, 1), t(0, 2, 3))
    merged = merge("task_arithmetic", [a, b], base=base, weights=[1, 1], lam=0.5)
    torch.testing.assert_close(merged["w"], t(0, 0, 1) + 0.5 * t(1, 2, 2))


def test_ties_without_trim_elects_signs_and_averages_the_agreeing():
    merged = merge("ties", specialists(), base={"w": BASE}, density=1.0)
    # Sums per entry: 2.5, -2.5, 0.4, 2 -> signs +, -, +, +; the disjoint means of the agreeing entries:
    # (2 + 1.5) / 2, (-1 - 2) / 2, (0.5 + 0.1) / 2, (4 + 1) / 2 -- the -3 and the -0.2 are outvoted.
    torch.testing.assert_close(merged["w"], BASE + t(1.75, -1.5, 0.3, 2.5))


def test_ties_trims_to_the_largest_entries_before_the_election():
    merged = merge("ties", specialists(), base={"w": BASE}, density=0.5, lam=1.0)
    # Trimmed to 2 of 4: (2, 0, 0, -3), (0, -2, 0, 4), (1.5, 0, 0, 1); sums 3.5, -2, 0, 2 -> +, -, none, +.
    torch.testing.assert_close(merged["w"], BASE + t(1.75, -2, 0, 2.5))


def test_ties_weights_can_swing_the_election():
    merged = merge("ties", specialists(), base={"w": BASE}, weights=[2, 1, 1], density=1.0, lam=0.5)
    # Weighted: (4, -2, 1, -6), (-1, -2, 0.1, 4), (1.5, 0.5, -0.2, 1); sums 4.5, -3.5, 0.9, -1: entry 3 turns
    # negative, so only the doubled -3 counts there. Means divide by the weights of the agreeing models.
    expected = t((4 + 1.5) / 3, (-2 - 2) / 3, (1 + 0.1) / 3, -6 / 2)
    torch.testing.assert_close(merged["w"], BASE + 0.5 * expected)


def test_dare_ties_drops_and_rescales_with_a_seeded_mask():
    n, density = 4096, 0.5
    base = {"w": torch.zeros(n)}
    models = states(torch.full((n,), 1.0), torch.full((n,), 3.0))
    merged = merge("dare_ties", models, base=base, density=density, seed=7)["w"]
    # Each entry survives in neither, the first, the second or both: 0, 1 / 0.5, 3 / 0.5, or the mean 4.
    outcomes = {value: int((merged == value).sum()) for value in (0.0, 2.0, 6.0, 4.0)}
    assert sum(outcomes.values()) == n and all(outcomes.values()), outcomes
    for count in outcomes.values():  # the two masks are independent draws: a quarter each, within 5 sigma
        assert abs(count - n / 4) < 5 * (n * 0.25 * 0.75) ** 0.5, outcomes
    # The mask is the documented draw: torch.rand < density from a generator seeded by sha256(seed/key/index).
    digest = hashlib.sha256(b"7/w/0").digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    first_kept = torch.rand(n, generator=generator) < density
    assert torch.equal(first_kept, (merged == 2.0) | (merged == 4.0))
    again = merge("dare_ties", models, base=base, density=density, seed=7)["w"]
    other_seed = merge("dare_ties", models, base=base, density=density, seed=8)["w"]
    assert torch.equal(again, merged) and not torch.equal(other_seed, merged)


def test_dare_ties_mask_does_not_depend_on_key_order():
    base = {"a": torch.zeros(64), "b": torch.zeros(64)}
    models = [{"a": torch.ones(64), "b": -torch.ones(64)}, {"a": 2 * torch.ones(64), "b": torch.ones(64)}]
    reordered = [{"b": m["b"], "a": m["a"]} for m in models]
    one = merge("dare_ties", models, base=base, density=0.3, seed=1)
    two = merge("dare_ties", reordered, base={"b": base["b"], "a": base["a"]}, density=0.3, seed=1)
    assert all(torch.equal(one[k], two[k]) for k in one)


def gpt_state(seed: int, **overrides) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    args = dict(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16) | overrides
    return GPT(GPTConfig(**args)).state_dict()


@pytest.mark.parametrize("method", ["linear", "task_arithmetic", "ties", "dare_ties"])
def test_tied_weights_stay_tied_and_inputs_are_untouched(method):
    base, a, b = gpt_state(0), gpt_state(1), gpt_state(2)
    copies = [{k: v.clone() for k, v in s.items()} for s in (base, a, b)]
    merged = merge(method, [a, b], base=base, density=0.5, seed=3)
    assert merged["lm_head.weight"] is merged["wte.weight"]
    GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16)).load_state_dict(merged)
    for original, copy in zip((base, a, b), copies):
        assert all(torch.equal(original[k], copy[k]) for k in copy)


def mergeable(label: str, state=None, digest: str = "a" * 64, **args) -> Mergeable:
    model_args = dict(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16) | args
    return Mergeable(label, model_args, state if state is not None else gpt_state(0, **args), digest)


def test_models_of_one_architecture_and_tokenizer_are_mergeable():
    check_mergeable([mergeable("models:/a/1"), mergeable("models:/b/1", state=gpt_state(5))])
    # A model.pt saved before `positions` existed has learned positions, as one that records them.
    check_mergeable([mergeable("models:/a/1"), mergeable("models:/b/1", positions="learned")])
    with pytest.raises(MergeRefused, match=r"model_args\['positions'\] \(rotary vs learned\)"):
        check_mergeable([mergeable("models:/a/1"), mergeable("models:/b/1", positions="rotary")])


@pytest.mark.parametrize(
    ("odd", "where"),
    [
        (mergeable("models:/b/2", n_layer=2), r"model_args\['n_layer'\] \(2 vs 1\)"),
        (mergeable("models:/b/2", digest="b" * 64), r"the tokenizer \(sha256\) \(bbbbbbbbbbbb vs aaaaaaaaaaaa\)"),
        (
            Mergeable("models:/b/2", mergeable("x").model_args, gpt_state(0, n_embd=8), "a" * 64),
            r"parameter 'wte.weight' \(\(32, 8\) torch.float32 vs \(32, 16\) torch.float32\)",
        ),
        (
            Mergeable("models:/b/2", mergeable("x").model_args, gpt_state(0) | {"extra": t(1)}, "a" * 64),
            r"parameter 'extra' \(True vs False\)",
        ),
    ],
)
def test_mismatched_models_are_refused_naming_the_key(odd, where):
    with pytest.raises(MergeRefused, match=rf"cannot merge models:/b/2 with models:/a/1: they differ at {where}"):
        check_mergeable([mergeable("models:/a/1"), odd])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "soup"}, "unknown merge method 'soup'"),
        ({"weights": [1.0]}, "1 weights for 2 models"),
        ({"base": None}, "adds task vectors to a base model"),
        ({"density": 0.0}, r"density must be in \(0, 1\]"),
    ],
)
def test_merge_refuses_bad_parameters(kwargs, message):
    args = {"method": "ties", "base": {"w": BASE}} | kwargs
    with pytest.raises(ValueError, match=message):
        merge(args.pop("method"), specialists()[:2], **args)


def test_the_merge_gate_wants_better_than_the_base_everywhere_and_close_to_each_specialist():
    from foundry.config import load_config
    from foundry.gates.merge import decide
    from foundry.specialists.merging import merge_inputs

    def decide_merge(scores, config):
        return decide(merge_inputs(scores, config))

    config = load_config(None, ["merge.max_gap=0.05"])
    base_holdout = merge_score(
        "models:/base/1", 9.0, 1.0, None
    )  # reported, never gated: however bad the merge is there
    close = decide_merge(
        [merge_score("models:/a/1", 1.20, 1.30, 1.16), merge_score("models:/b/1", 1.24, 1.35, 1.20), base_holdout],
        config,
    )
    assert close.passed and close.verdict.startswith("beats the base on all 2 parents' holdouts")
    diluted = decide_merge(
        [merge_score("models:/a/1", 1.20, 1.30, 1.16), merge_score("models:/b/1", 1.26, 1.35, 1.20), base_holdout],
        config,
    )
    assert not diluted.passed and not diluted.make_champion
    assert diluted.verdict == (
        "on models:/b/1's holdout the merge's 1.2600 trails the specialist's 1.2000 bits/byte by 0.0600, "
        "more than merge.max_gap 0.05"
    )
