"""Merging models of one architecture by their parameters: plain functions over state dicts, no training.

A task vector is a fine-tuned model's weights minus its base's (Ilharco et al.). Every method works
tensor by tensor in float32 and returns tensors of the inputs' dtype; the inputs are never modified.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from models.gpt import GPTConfig

State = dict[str, torch.Tensor]
METHODS = ("linear", "task_arithmetic", "ties", "dare_ties")


class MergeRefused(ValueError):
    """Models that cannot be merged; the message names the key where they differ."""


@dataclass(frozen=True)
class Mergeable:
    """One model offered to a merge: where it comes from, how it is built, its weights, its tokenizer."""

    label: str
    model_args: dict
    state: State
    tokenizer_digest: str


def _refuse(first: Mergeable, other: Mergeable, where: str, mine: object, theirs: object) -> None:
    raise MergeRefused(
        f"cannot merge {other.label} with {first.label}: they differ at {where} ({theirs} vs {mine}). "
        "A merge adds parameters element by element, so every model needs the same architecture, the same "
        "parameter shapes and the same tokenizer; fine-tune the odd one out from the same base instead."
    )


def check_mergeable(models: Sequence[Mergeable]) -> None:
    """Refuse, naming the first differing key, unless all models share architecture, shapes and tokenizer."""
    first = models[0]
    first_args = GPTConfig(**first.model_args).to_dict()  # a key saved models predate means its default
    for other in models[1:]:
        other_args = GPTConfig(**other.model_args).to_dict()
        for key in sorted(first_args.keys() | other_args.keys()):
            if first_args.get(key) != other_args.get(key):
                _refuse(first, other, f"model_args[{key!r}]", first_args.get(key), other_args.get(key))
        for key in sorted(first.state.keys() ^ other.state.keys()):
            _refuse(first, other, f"parameter {key!r}", key in first.state, key in other.state)
        for key, tensor in first.state.items():
            theirs = other.state[key]
            if tensor.shape != theirs.shape or tensor.dtype != theirs.dtype:
                mine_kind, their_kind = (f"{tuple(t.shape)} {t.dtype}" for t in (tensor, theirs))
                _refuse(first, other, f"parameter {key!r}", mine_kind, their_kind)
        if first.tokenizer_digest != other.tokenizer_digest:
            _refuse(first, other, "the tokenizer (sha256)", first.tokenizer_digest[:12], other.tokenizer_digest[:12])


# --- per-tensor kernels: `taus` are task vectors (model minus base) in float32 -------------------------


def _trim(tau: torch.Tensor, density: float) -> torch.Tensor:
    """TIES' trim: keep the ceil(density * n) entries of largest magnitude, zero the rest."""
    keep = math.ceil(density * tau.numel())
    if keep >= tau.numel():
        return tau.clone()
    kept = torch.zeros(tau.numel(), dtype=torch.bool)
    kept[tau.abs().flatten().topk(keep).indices] = True
    return torch.where(kept.view_as(tau), tau, torch.zeros_like(tau))


def _disjoint_mean(taus: list[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """TIES' elect and merge: the sign of the summed weighted updates wins each entry; the entry is the
    weighted mean of the updates that agree with it (zeros never vote)."""
    weighted = [w * tau for w, tau in zip(weights, taus)]
    elected = torch.sign(sum(weighted))
    agree = [(torch.sign(t) == elected) & (t != 0) for t in weighted]
    total = sum(t * a for t, a in zip(weighted, agree))
    mass = sum(w * a.float() for w, a in zip(weights, agree))
    return torch.where(mass > 0, total / torch.where(mass > 0, mass, 1.0), torch.zeros_like(total))


def _dare_mask(shape: torch.Size, density: float, seed: int, key: str, index: int) -> torch.Tensor:
    """Which entries of model `index`'s update of `key` survive: a Bernoulli(density) draw from a generator
    seeded by (seed, key, index), so the mask is the same in every run and independent of key order."""
    digest = hashlib.sha256(f"{seed}/{key}/{index}".encode()).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return torch.rand(shape, generator=generator) < density


# --- the methods, over whole state dicts ------------------------------------------------------------------


def _per_key(states: Sequence[State], merge_one: Callable[[str, list[torch.Tensor]], torch.Tensor]) -> State:
    """Apply `merge_one(key, [tensor of each state])` to every float tensor. Tensors that share storage in the
    first state (tied weights) are merged once and stay shared; non-float tensors must agree and are copied."""
    merged: State = {}
    seen: dict[tuple, str] = {}
    for key, tensor in states[0].items():
        alias = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if alias in seen:
            merged[key] = merged[seen[alias]]
            continue
        seen[alias] = key
        tensors = [state[key] for state in states]
        if not tensor.is_floating_point():
            if any(not torch.equal(tensor, t) for t in tensors[1:]):
                raise MergeRefused(f"cannot merge: the non-float tensor {key!r} differs between models")
            merged[key] = tensor.clone()
            continue
        merged[key] = merge_one(key, [t.float() for t in tensors]).to(tensor.dtype)
    return merged


def linear(states: Sequence[State], weights: Sequence[float]) -> State:
    """Weighted average of the parameters, sum(w_i * theta_i) / sum(w_i) ("model soups": Wortsman et al.,
    "Model soups: averaging weights of multiple fine-tuned models improves accuracy", ICML 2022)."""
    total = sum(weights)
    return _per_key(states, lambda _, ts: sum(w * t for w, t in zip(weights, ts)) / total)


def task_arithmetic(base: State, states: Sequence[State], weights: Sequence[float], lam: float) -> State:
    """base + lam * sum(w_i * (theta_i - base)) (Ilharco et al., "Editing Models with Task Arithmetic",
    ICLR 2023)."""

    def one(_: str, ts: list[torch.Tensor]) -> torch.Tensor:
        anchor = ts[0]
        return anchor + lam * sum(w * (t - anchor) for w, t in zip(weights, ts[1:]))

    return _per_key([base, *states], one)


def ties(base: State, states: Sequence[State], weights: Sequence[float], density: float, lam: float) -> State:
    """TIES-Merging (Yadav et al., "TIES-Merging: Resolving Interference When Merging Models", NeurIPS 2023):
    trim each task vector to its `density` largest-magnitude entries, elect a sign per entry, take the
    disjoint (weighted) mean of the agreeing entries; base + lam * that."""

    def one(_: str, ts: list[torch.Tensor]) -> torch.Tensor:
        anchor = ts[0]
        taus = [_trim(t - anchor, density) for t in ts[1:]]
        return anchor + lam * _disjoint_mean(taus, weights)

    return _per_key([base, *states], one)


def dare_ties(
    base: State, states: Sequence[State], weights: Sequence[float], density: float, lam: float, seed: int
) -> State:
    """DARE then TIES (Yu et al., "Language Models are Super Mario: Absorbing Abilities from Homologous
    Models as a Free Lunch", ICML 2024): drop each task-vector entry with probability 1 - density (a seeded
    mask), rescale the survivors by 1 / density, then elect signs and take the disjoint mean as TIES does."""

    def one(key: str, ts: list[torch.Tensor]) -> torch.Tensor:
        anchor = ts[0]
        taus = [(t - anchor) * _dare_mask(t.shape, density, seed, key, i) / density for i, t in enumerate(ts[1:])]
        return anchor + lam * _disjoint_mean(taus, weights)

    return _per_key([base, *states], one)


def merge(
    method: str,
    states: Sequence[State],
    *,
    base: State | None,
    weights: Sequence[float] | None = None,
    density: float = 1.0,
    lam: float = 1.0,
    seed: int = 0,
) -> State:
    """One entry point for the four methods; `weights` default to 1 each. Every method but `linear` needs a base."""
    if method not in METHODS:
        raise ValueError(f"unknown merge method {method!r}; choose one of {', '.join(METHODS)}")
    if len(states) < 2:
        raise ValueError(f"a merge needs at least two models, got {len(states)}")
    weights = list(weights) if weights else [1.0] * len(states)
    if len(weights) != len(states):
        raise ValueError(f"{len(weights)} weights for {len(states)} models: give one weight per model")
    if not 0 < density <= 1:
        raise ValueError(f"density must be in (0, 1], got {density}")
    if method == "linear":
        return linear(states, weights)
    if base is None:
        raise ValueError(f"merge method {method} adds task vectors to a base model: name one")
    if method == "task_arithmetic":
        return task_arithmetic(base, states, weights, lam)
    if method == "ties":
        return ties(base, states, weights, density, lam)
    return dare_ties(base, states, weights, density, lam, seed)
