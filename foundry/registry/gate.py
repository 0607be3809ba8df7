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

An image classifier goes through the same rule by holdout accuracy, higher is better (`gather_image`): the
same footing, the champion's recorded accuracy or a re-scoring, both on the champion's own holdout.

A domain fine-tune is judged against its base and the specialist's own champion (`gather_specialist`); a merge
against the champion of its name on the parents' holdouts it was scored on (`gather_merge`); an aligned model
against its base and the champion of its name, on the same held-out alignment data (`gather_alignment`).
Each looks the champion up with `versions.champion`, which fails closed: a registry error is not "no champion".
"""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.align.metrics import AlignmentMetrics
from foundry.config import FoundryConfig
from foundry.core.contracts import Candidate, DataVersion
from foundry.data.purged import DataPurged, followed, mark_of
from foundry.evaluation.holdout_metrics import HoldoutMetrics
from foundry.gates import alignment, pretrain, specialist
from foundry.gates.decision import Decision
from foundry.gates.inputs import (
    AlignedScores,
    AlignmentInputs,
    HoldoutScore,
    ImageInputs,
    MergeInputs,
    OldHoldout,
    OldImageHoldout,
    PretrainInputs,
    SpecialistInputs,
)
from foundry.registry import versions
from foundry.registry.lineage import recorded_metrics

log = logging.getLogger(__name__)


def score(weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> float:
    """Bits per byte of a model on the holdout of `data_dir`, tokenized with its own tokenizer."""
    from foundry.evaluation.metrics import holdout_metrics
    from models.gpt import load_gpt

    e, model = config.evaluation, load_gpt(weights)
    return holdout_metrics(model, tokenizer, data_dir, e.batch_size, e.max_tokens, e.window_overlap).bits_per_byte


def champion_bits_per_byte(champion, config: FoundryConfig, data_dir: Path, data: DataVersion, home: Path) -> float:
    """The champion's score on this holdout: its recorded one if it was evaluated on it alike (`_scored_alike`),
    else re-scored."""
    if champion.tags.get("data_version") == data.data_version and _scored_alike(champion, config):
        recorded = recorded_metrics(champion).get(
            HoldoutMetrics.key("bits_per_byte")
        )  # its run's, or tags of older versions
        if recorded is not None:
            return recorded
    artifacts = versions.download(champion, home)
    bpb = score(artifacts / "model.pt", artifacts / "tokenizer.json", data_dir, config)
    log.info("champion v%s re-scored on data %s: %.4f bits/byte", champion.version, data.data_version, bpb)
    return bpb


def _scored_alike(champion, config: FoundryConfig) -> bool:
    """Whether the champion's recorded holdout score was scored as this run scores: the same
    `evaluation.max_tokens` from the holdout's start (a record that names none is taken as it was before) and
    `evaluation.window_overlap` (`as_recorded` gives older records the 0 they were scored with)."""
    from foundry.registry.lineage import recorded_config

    recorded, e = recorded_config(champion).get("evaluation", {}), config.evaluation
    max_tokens, overlap = recorded.get("max_tokens"), recorded.get("window_overlap", 0.0)
    return (max_tokens is None or int(max_tokens) == e.max_tokens) and float(overlap) == e.window_overlap


def champion_data(champion) -> DataVersion:
    """The data version a registered version was trained and evaluated on, from its lineage tags; a tag that
    is not a data version stops the run (`tags.BadTag`, naming the version and the tag)."""
    from foundry.registry import tags

    try:
        return tags.data_version(champion)
    except KeyError as missing:
        raise ValueError(
            f"champion models:/{champion.name}/{champion.version} records no {missing} tag: its holdout cannot "
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


def old_holdout(champion, candidate: Candidate, champion_bpb: float, config: FoundryConfig) -> OldHoldout:
    """Challenger and champion on the champion's own holdout (`own_holdout`, hydrated once per node)."""
    from foundry.data.hydrate import hydrate_version

    limit, home = config.evaluation.max_regression, candidate.run.home
    old, purge = own_holdout(champion, home)
    if old.data_version == candidate.data.data_version:  # the same holdout: its scores are the ones above
        return OldHoldout(
            data_version=old.data_version,
            challenger_bits_per_byte=candidate.metrics.bits_per_byte,
            champion_bits_per_byte=champion_bpb,
            max_regression=limit,
            **purge,
        )
    old_dir = hydrate_version(old, home)
    artifacts = versions.download(champion, home)
    return OldHoldout(
        data_version=old.data_version,
        challenger_bits_per_byte=score(candidate.checkpoint, candidate.tokenizer, old_dir, config),
        champion_bits_per_byte=score(artifacts / "model.pt", artifacts / "tokenizer.json", old_dir, config),
        max_regression=limit,
        **purge,
    )


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


def gather_pretrain(config: FoundryConfig, candidate: Candidate, built_on: str | None = None) -> PretrainInputs:
    """The pretraining gate's inputs for `candidate`, whose data was built on the ledger of data version
    `built_on` (None: built afresh): the champion scored on its holdout, and both on the champion's own."""
    c = candidate
    given = {
        "challenger_bits_per_byte": c.metrics.bits_per_byte,
        "min_improvement": config.evaluation.min_improvement,
        "auto_promote": config.registry.auto_promote,
    }
    current = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    if current is None:
        return PretrainInputs(**given)
    if refusal := _footing(current, built_on, c.data, c.run.home):  # nothing to compare on a fair footing
        return PretrainInputs(**given, champion_version=str(current.version), footing=refusal)
    champion_bpb = champion_bits_per_byte(current, config, c.data_dir, c.data, c.run.home)
    return PretrainInputs(
        **given,
        champion_version=str(current.version),
        champion_bits_per_byte=champion_bpb,
        old_holdout=old_holdout(current, c, champion_bpb, config),
    )


def decide(config: FoundryConfig, candidate: Candidate, built_on: str | None = None) -> Decision:
    """The pretraining gate on `candidate`: gathered, then decided by `foundry.gates.pretrain` (an image
    classifier's inputs by accuracy, a text model's by bits per byte)."""
    from foundry.vision.metrics import VisionMetrics

    if isinstance(candidate.metrics, VisionMetrics):
        return pretrain.decide(gather_image(config, candidate, built_on))
    return pretrain.decide(gather_pretrain(config, candidate, built_on))


# --- image classifiers: the same rule by holdout accuracy ---------------------------------------------


def image_accuracy(champion, config: FoundryConfig, data_dir: Path, data: DataVersion, home: Path) -> float:
    """The champion's accuracy on this holdout: its recorded one when it was evaluated on this data version
    (the whole holdout is always scored), else re-scored."""
    from foundry.vision.evaluate import accuracy_on
    from foundry.vision.metrics import VisionMetrics

    if champion.tags.get("data_version") == data.data_version:
        recorded = recorded_metrics(champion).get(VisionMetrics.key("accuracy"))
        if recorded is not None:
            return recorded
    artifacts = versions.download(champion, home)
    accuracy = accuracy_on(artifacts / "model.pt", data_dir, config.evaluation.batch_size)
    log.info("champion v%s re-scored on data %s: accuracy %.4f", champion.version, data.data_version, accuracy)
    return accuracy


def old_image_holdout(champion, candidate: Candidate, champion_accuracy: float, config: FoundryConfig):
    """Both classifiers on the champion's own holdout (its data version, hydrated once per node)."""
    from foundry.data.hydrate import hydrate_version
    from foundry.vision.evaluate import accuracy_on

    old, purge = own_holdout(champion, candidate.run.home)
    limit = config.evaluation.max_regression
    if old.data_version == candidate.data.data_version:
        challenger, champion_score = candidate.metrics.accuracy, champion_accuracy
    else:
        old_dir, batch = hydrate_version(old, candidate.run.home), config.evaluation.batch_size
        challenger = accuracy_on(candidate.checkpoint, old_dir, batch)
        champion_score = accuracy_on(versions.download(champion, candidate.run.home) / "model.pt", old_dir, batch)
    return OldImageHoldout(
        data_version=old.data_version,
        challenger_accuracy=challenger,
        champion_accuracy=champion_score,
        max_regression=limit,
        **purge,
    )


def gather_image(config: FoundryConfig, candidate: Candidate, built_on: str | None = None) -> ImageInputs:
    """`gather_pretrain` for an image classifier: `evaluation.min_improvement` and `max_regression` read as
    accuracy (a share of the holdout)."""
    c = candidate
    given = {
        "challenger_accuracy": c.metrics.accuracy,
        "min_improvement": config.evaluation.min_improvement,
        "auto_promote": config.registry.auto_promote,
    }
    current = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    if current is None:
        return ImageInputs(**given)
    if refusal := _footing(current, built_on, c.data, c.run.home):
        return ImageInputs(**given, champion_version=str(current.version), footing=refusal)
    champion_accuracy = image_accuracy(current, config, c.data_dir, c.data, c.run.home)
    return ImageInputs(
        **given,
        champion_version=str(current.version),
        champion_accuracy=champion_accuracy,
        old_holdout=old_image_holdout(current, c, champion_accuracy, config),
    )


def gather_specialist(config: FoundryConfig, candidate: Candidate, base_uri: str) -> SpecialistInputs:
    """A domain fine-tune's inputs: its base re-scored on the domain holdout and both on the base's own (the
    `champion_*` fields), and the specialist's own champion (`finetune.model_name`) on the domain holdout."""
    c = candidate
    base = versions.resolve(base_uri)
    base_bpb = champion_bits_per_byte(base, config, c.data_dir, c.data, c.run.home)
    incumbent = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    incumbent_bpb = None
    if incumbent is not None:
        incumbent_bpb = champion_bits_per_byte(incumbent, config, c.data_dir, c.data, c.run.home)
    return SpecialistInputs(
        challenger_bits_per_byte=c.metrics.bits_per_byte,
        min_improvement=config.evaluation.min_improvement,
        auto_promote=config.registry.auto_promote,
        champion_version=str(base.version),
        champion_bits_per_byte=base_bpb,
        old_holdout=old_holdout(base, c, base_bpb, config),
        base=f"models:/{base.name}/{base.version}",
        incumbent_version=None if incumbent is None else str(incumbent.version),
        incumbent_bits_per_byte=incumbent_bpb,
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
        bpb = score(files / "model.pt", files / "tokenizer.json", holdout, config)
        rescored.append(s.model_copy(update={"incumbent_bits_per_byte": bpb}))
    shown = [round(s.incumbent_bits_per_byte, 4) for s in rescored]
    log.info("champion v%s of %s on the merge's holdouts: %s bits/byte", current.version, name, shown)
    return given.model_copy(update={"scores": rescored, "incumbent_version": str(current.version)})


# --- alignment: the aligned model against its base and the champion of its name ------------------------


def alignment_inputs(
    config: FoundryConfig,
    metrics: AlignmentMetrics,
    incumbent_version: str | None = None,
    incumbent: AlignedScores | None = None,
) -> AlignmentInputs:
    """The alignment gate's inputs from the aligned model's and the base's scores, and the champion of
    `align.model_name` scored on the same held-out data (when there is one)."""
    return AlignmentInputs(
        method=config.align.method,
        aligned=metrics.aligned,
        base=metrics.base,
        max_regression=config.evaluation.max_regression,
        auto_promote=config.registry.auto_promote,
        incumbent_version=incumbent_version,
        incumbent=incumbent,
    )


def gather_alignment(config: FoundryConfig, candidate: Candidate) -> AlignmentInputs:
    """The champion of the name the aligned model registers under, scored on the candidate's held-out
    alignment data; one with another tokenizer cannot be scored on these tokens and counts as unscored."""
    from foundry.align.evaluation import heldout_scores
    from foundry.data.manifest import DatasetManifest
    from models.gpt import load_gpt

    c, name = candidate, config.registry.model_name
    current = versions.champion(name)  # fails closed: an error is not "no champion"
    if current is None:
        return alignment_inputs(config, c.metrics)
    artifacts = versions.download(current, c.run.home)
    scores = None
    if (artifacts / "tokenizer.json").read_bytes() == c.tokenizer.read_bytes():
        manifest = DatasetManifest.read(c.data_dir)
        held = heldout_scores(load_gpt(artifacts / "model.pt"), c.data_dir, manifest, config.evaluation.batch_size)
        scores = AlignedScores(**held)
        log.info("champion v%s of %s on this held-out data: %s", current.version, name, held)
    else:
        log.warning("champion v%s of %s has another tokenizer: not comparable on this data", current.version, name)
    return alignment_inputs(config, c.metrics, str(current.version), scores)


def decide_alignment(config: FoundryConfig, candidate: Candidate) -> Decision:
    """The alignment gate on `candidate`: gathered, then decided by `foundry.gates.alignment`."""
    return alignment.decide(gather_alignment(config, candidate))
