"""Stage E, the promotion gates' I/O: what each gate's pure rule (`foundry.gates`) decides on, gathered from
the registry and the holdouts. The pretraining gate's inputs:

0. The champion is the last one whose publication completed (`versions.champion`); versions a dead run left
   half-published are withdrawn by the next publication of the model (`versions.publish`).
1. Same footing: the champion's data version must be the one this run's data was built on (its ledger), or
   this very data; otherwise the champion's training documents may sit in this holdout, and the run is
   refused (run it again: it builds on the new champion's ledger).
2. Better on the new holdout: the challenger is compared with the champion on the challenger's own holdout.
   When the champion was evaluated on that same data version, alike, its recorded score is used; otherwise it
   is re-scored on this holdout, so both are measured on the same bytes the same way.
3. No forgetting: both are scored on the champion's own holdout (its data version, hydrated on this node);
   a challenger worse there by more than `evaluation.max_regression` bits per byte is refused.

The candidate's workload (`foundry.core.workload.for_data`) says what is compared (`gate_compares`) and
scores a model by it (`gate_score`): a language model by bits per byte, an image classifier by holdout accuracy
(higher is better), through the same footing, recorded-or-re-scored champion and own-holdout guard.

The other gates' I/O lives with the feature that owns them and builds on the helpers here (`champion_score`,
`old_holdout`, `own_holdout`; a model is scored by its workload's `gate_score`): the specialist and merge gates' in
`foundry.specialists.gate`, the alignment gate's in `foundry.align.gate`. Each looks the champion up with `versions.champion`, which fails
closed: a registry error is not "no champion".
"""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.contracts import Candidate, DataVersion
from foundry.core.model_uri import ModelUri
from foundry.core.version_tags import VersionTags
from foundry.core.workload import Workload, for_data
from foundry.data.purged import DataPurged, followed, mark_of
from foundry.gates import pretrain
from foundry.gates.decision import Decision
from foundry.gates.inputs import AgainstChampion, OldScores
from foundry.registry import versions

log = logging.getLogger(__name__)


def champion_score(
    workload: Workload, champion, config: FoundryConfig, data_dir: Path, data: DataVersion, home: Path
) -> float:
    """The champion's score on this holdout by the workload's measure: its recorded one if it was evaluated on
    this data version alike (`Workload.recorded_score`), else re-scored."""
    if VersionTags.from_tags(champion.tags).data_version == data.data_version:
        recorded = workload.recorded_score(champion, config)  # its run's, or tags of older versions
        if recorded is not None:
            return recorded
    artifacts = versions.download(champion, home)
    found = workload.gate_score(artifacts / "model.pt", artifacts / "tokenizer.json", data_dir, config)
    unit = workload.gate_compares().measure.unit
    log.info("champion v%s re-scored on data %s: %.4f %s", champion.version, data.data_version, found, unit)
    return found


def champion_data(champion) -> DataVersion:
    """The data version a registered version was trained and evaluated on, from its lineage tags; a tag that
    is not a data version stops the run (`tags.BadTag`, naming the version and the tag)."""
    from foundry.registry import tags

    try:
        return tags.data_version(champion)
    except KeyError as missing:
        raise ValueError(
            f"champion {ModelUri.of(champion)} records no {missing} tag: its holdout cannot "
            "be found, so nothing can be compared with it; promote a version the pipeline registered"
        ) from None


def own_holdout(champion, home: Path) -> tuple[DataVersion, dict[str, str]]:
    """The data version holding the champion's own holdout: its training data or, once a purge removed that
    (`--keep-models`), the version the purge rewrote it into (`purged.followed`), with what the gate's inputs
    record of it (`replaces`, `purge_record`). `DataPurged` naming the record when nothing replaced it."""
    trained = champion_data(champion)
    if (held := followed(trained, home)) == trained:
        return held, {}
    purge = mark_of(home, trained.data_version)
    return held, {"replaces": trained.data_version, "purge_record": purge.record}


def old_holdout(
    workload: Workload, champion, candidate: Candidate, champion_scored: float, config: FoundryConfig
) -> OldScores:
    """Challenger and champion on the champion's own holdout (`own_holdout`, hydrated once per node)."""
    from foundry.data.hydrate import hydrate_version

    compared, home = workload.gate_compares(), candidate.run.home
    old, purge = own_holdout(champion, home)
    if old.data_version == candidate.data.data_version:  # the same holdout: its scores are the ones above
        challenger, theirs = getattr(candidate.metrics, compared.measure.name), champion_scored
    else:
        old_dir = hydrate_version(old, home)
        artifacts = versions.download(champion, home)
        challenger = workload.gate_score(candidate.checkpoint, candidate.tokenizer, old_dir, config)
        theirs = workload.gate_score(artifacts / "model.pt", artifacts / "tokenizer.json", old_dir, config)
    return compared.old_holdout(
        data_version=old.data_version,
        max_regression=config.evaluation.max_regression,
        **measured(compared.measure.name, challenger=challenger, champion=theirs),
        **purge,
    )


def measured(measure: str, **scores: float | None) -> dict[str, float | None]:
    """Scores as the typed inputs name them: `challenger=` to `challenger_<measure>`, and so on."""
    return {f"{who}_{measure}": value for who, value in scores.items()}


def _footing(champion, built_on: str | None, data: DataVersion, home: Path) -> str:
    """Why the champion cannot be compared with this run ('' when it can). Its data is the version a purge
    replaced it with, if any (the one `parent.data_of` built this run on); data a purge deleted: refused."""
    try:
        trained_on = own_holdout(champion, home)[0].data_version
    except DataPurged as purged:
        return (
            f"champion v{champion.version} cannot be scored on its own holdout: {purged}; promote a version "
            "trained on kept data, or retrain on the purged data (`foundry purge --retrain`)"
        )
    if trained_on in (built_on, data.data_version):
        return ""
    return (
        f"champion v{champion.version} (data {trained_on[:12]}) is not the version this run's data was built on "
        f"({built_on[:12] if built_on else 'none'}): its training documents may be in this holdout; run again"
    )


def gather_pretrain(config: FoundryConfig, candidate: Candidate, built_on: str | None = None) -> AgainstChampion:
    """The pretraining gate's inputs for `candidate`, whose data was built on the ledger of data version
    `built_on` (None: built afresh): the champion scored on its holdout, and both on the champion's own; by the
    measure of the candidate's workload (`evaluation.min_improvement` and `max_regression` read in it)."""
    c, workload = candidate, for_data(candidate.data_dir)
    compared = workload.gate_compares()
    name = compared.measure.name
    given = {
        **measured(name, challenger=getattr(c.metrics, name)),
        "min_improvement": config.evaluation.min_improvement,
        "auto_promote": config.registry.auto_promote,
    }
    current = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    if current is None:
        return compared.inputs(**given)
    if refusal := _footing(current, built_on, c.data, c.run.home):  # nothing to compare on a fair footing
        return compared.inputs(**given, champion_version=str(current.version), footing=refusal)
    theirs = champion_score(workload, current, config, c.data_dir, c.data, c.run.home)
    return compared.inputs(
        **given,
        **measured(name, champion=theirs),
        champion_version=str(current.version),
        old_holdout=old_holdout(workload, current, c, theirs, config),
    )


def decide(config: FoundryConfig, candidate: Candidate, built_on: str | None = None) -> Decision:
    """The pretraining gate on `candidate`: gathered, then decided by `foundry.gates.pretrain`."""
    return pretrain.decide(gather_pretrain(config, candidate, built_on))
