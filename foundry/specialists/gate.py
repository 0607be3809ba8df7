"""The specialist and merge gates' I/O: what their pure rules (`foundry.gates.specialist`, `foundry.gates.merge`)
decide on, gathered from the registry and the holdouts, with the pretraining gate's helpers
(`foundry.registry.gate`: a champion's recorded-or-re-scored score, its own holdout, a purge's replacement).

A domain fine-tune is judged against its base and the specialist's own champion (`gather_specialist`); a merge
against the champion of its name on the parents' holdouts it was scored on (`gather_merge`). Each looks the
champion up with `versions.champion`, which fails closed: a registry error is not "no champion".
"""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.contracts import Candidate
from foundry.core.model_uri import ModelUri
from foundry.core.workload import for_data
from foundry.gates import specialist
from foundry.gates.decision import Decision
from foundry.gates.inputs import AgainstBase, HoldoutScore, MergeInputs
from foundry.registry import versions
from foundry.registry.gate import champion_score, measured, old_holdout, own_holdout

log = logging.getLogger(__name__)


def gather_specialist(config: FoundryConfig, candidate: Candidate, base_uri: str) -> AgainstBase:
    """A domain fine-tune's inputs, by the measure of its workload: its base re-scored on the domain holdout
    and both on the base's own (the `champion_*` fields), and the specialist's own champion
    (`finetune.model_name`) on the domain holdout. An image fine-tune's labels the base lacks count as misses."""
    c, workload = candidate, for_data(candidate.data_dir)
    compared = workload.gate_compares()
    base = versions.resolve(base_uri)
    on_base = champion_score(workload, base, config, c.data_dir, c.data, c.run.home)
    incumbent = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    theirs = None
    if incumbent is not None:
        theirs = champion_score(workload, incumbent, config, c.data_dir, c.data, c.run.home)
    return compared.specialist(
        **measured(compared.measure.name, challenger=getattr(c.metrics, compared.measure.name)),
        **measured(compared.measure.name, champion=on_base, incumbent=theirs),
        min_improvement=config.evaluation.min_improvement,
        auto_promote=config.registry.auto_promote,
        champion_version=str(base.version),
        old_holdout=old_holdout(workload, base, c, on_base, config),
        base=str(ModelUri.of(base)),
        incumbent_version=None if incumbent is None else str(incumbent.version),
    )


def decide_specialist(config: FoundryConfig, candidate: Candidate, base_uri: str) -> Decision:
    """The specialist gate on `candidate`: gathered, then decided by `foundry.gates.specialist`."""
    return specialist.decide(gather_specialist(config, candidate, base_uri))


def gather_merge(config: FoundryConfig, scores: list[HoldoutScore], name: str, home: Path) -> MergeInputs:
    """The merge gate's inputs: the merge's `scores` (`foundry.specialists.merging.score_holdouts`) and the
    champion of `name`, the name the merge registers under, re-scored on each of those holdouts with the same
    evaluation settings, so both are measured on the same bytes."""
    from foundry.data.hydrate import hydrate_version

    given = MergeInputs(scores=scores, max_gap=config.merge.max_gap, auto_promote=config.registry.auto_promote)
    current = versions.champion(name)  # fails closed: an error is not "no champion"
    if current is None:
        return given
    files = versions.download(current, home)
    rescored = []
    for s in scores:
        held, _ = own_holdout(versions.resolve(s.holdout_of), home)  # a purge's replacement, if any
        holdout = hydrate_version(held, home)  # once per node
        bpb = for_data(holdout).gate_score(files / "model.pt", files / "tokenizer.json", holdout, config)
        rescored.append(s.model_copy(update={"incumbent_bits_per_byte": bpb}))
    shown = [round(s.incumbent_bits_per_byte, 4) for s in rescored]
    log.info("champion v%s of %s on the merge's holdouts: %s bits/byte", current.version, name, shown)
    return given.model_copy(update={"scores": rescored, "incumbent_version": str(current.version)})
