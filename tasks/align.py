"""Alignment as Prefect tasks: the version it starts from, its data, evaluation beside the base, gate, registration;
and for `foundry reproduce` of an aligned version, the pretraining data it replayed and its own scores again."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core.contracts import Candidate, DataVersion, ParentModel, Promotion, Replay, RunContext, SourceManifest
from foundry.core.energy import RunEnergy
from foundry.core.metrics.aligned import AlignmentMetrics
from foundry.core.metrics.scores import AlignedScores
from foundry.core.model_uri import LoggedModelUri
from foundry.data.manifest import DatasetManifest
from foundry.gates.decision import Decision
from foundry.runtime import tracking


@task(name="parent", cache_policy=NO_CACHE)
def parent_version(model_uri: str, home: Path) -> ParentModel:
    """Any registered version (downloaded once per version)."""
    from foundry.registry.parent import fetch_version

    return fetch_version(model_uri, home)


@task(name="chat-base", cache_policy=NO_CACHE)
def chat_base(parent: ParentModel, home: Path) -> ParentModel:
    """The parent with the chat template's tokens (grown embedding and tokenizer), written once per version."""
    from foundry.align.start import chat_base as with_chat_tokens

    return with_chat_tokens(parent, home)


@task(name="replay-source", cache_policy=NO_CACHE)
def replay_source(config: FoundryConfig, parent: ParentModel, home: Path) -> Replay | None:
    """With `align.replay_fraction` > 0 (the default), what the run (SFT or DPO) replays: the parent's pretraining
    data version, hydrated (None without replay). Refused before any work when the parent records none: no silent
    fallback, since without that data the gate's forgetting check cannot pass either."""
    a = config.align
    if a.replay_fraction == 0:
        return None
    if parent.pretrain_data is None:
        raise ValueError(
            f"align.replay_fraction {a.replay_fraction} needs pretraining data to replay; {parent.uri} records none "
            "(no pretrain.data_version tag), so its gate's forgetting check cannot pass either: start from a "
            "version that has one, or set align.replay_fraction=0 to train without replay (a challenger at most)"
        )
    return _hydrated(parent.pretrain_data, home)


@task(name="replay-recorded", cache_policy=NO_CACHE)
def hydrated_replay(data: DataVersion, home: Path) -> Replay:
    """The pretraining data an aligned version replayed, as its tags record it (`lineage.replayed_data`), hydrated on
    this node for `foundry reproduce` to replay again."""
    return _hydrated(data, home)


def _hydrated(data: DataVersion, home: Path) -> Replay:
    from foundry.data.hydrate import hydrate_version

    return Replay(data=data, dir=hydrate_version(data, home))


def _align_dataset_key(context, parameters: dict) -> str:
    from foundry.align import split_ledger
    from foundry.align.prepare import align_dataset_key
    from foundry.data.purged import purged_documents

    home = parameters["run"].home
    ledger, purged = split_ledger.digest(home), purged_documents(home)
    return align_dataset_key(parameters["config"], parameters["source_manifest"].digest, ledger, purged)


@task(name="align-dataset", cache_key_fn=_align_dataset_key, persist_result=True, result_serializer="json")
def align_dataset(config: FoundryConfig, source_manifest: SourceManifest, run: RunContext) -> DataVersion:
    """Prepare (check, scrub, encode, split on the split ledger), validate and version the records, unless these
    records with this tokenizer, context, code and ledger were versioned before. The ledger is held throughout
    and gains the new prompts only once their data version exists."""
    from foundry.align import split_ledger

    with split_ledger.locked(run.home) as ledger:
        data, kept = _prepare_and_version(config, source_manifest, run, ledger)
        split_ledger.extend(run.home, kept, data.data_version)
    return data


def _prepare_and_version(
    config: FoundryConfig, source_manifest: SourceManifest, run: RunContext, ledger: Path | None
) -> tuple[DataVersion, list[tuple[str, str, str]]]:
    """The data version and its records' ledger rows (read before versioning moves the folder)."""
    from foundry.align import split_ledger
    from foundry.align.prepare import prepare_aligned
    from foundry.align.validate import validate_aligned
    from foundry.data.purged import purged_documents
    from foundry.data.versioning import version_dataset

    staged = run.dir / "prepared"
    purged = frozenset(purged_documents(run.home))  # records a purge removed, should a source still hold them
    manifest = prepare_aligned(source_manifest, config, staged, ledger=ledger, purged=purged)
    for name in ("audit.json", "audit.md"):
        tracking.log_artifact(run.run_id, staged / name, "data")
    get_run_logger().info("prepared %s", manifest.stats)
    report, docs = run.dir / "validation_report.json", run.dir / "validation_docs"
    try:
        validate_aligned(staged, config, report, docs_dir=docs)
    finally:
        if report.exists():
            tracking.log_artifact(run.run_id, report, "validation")
        if docs.exists():
            tracking.log_artifact(run.run_id, docs, "validation_docs")
    kept = list(split_ledger.kept_records(staged))
    return version_dataset(config, staged, source_manifest, run.home), kept


@task(name="evaluate-aligned", cache_policy=NO_CACHE)
def evaluate_aligned(
    config: FoundryConfig, checkpoint: Path, parent: ParentModel, base: ParentModel, data_dir: Path, run: RunContext
) -> AlignmentMetrics:
    """Held-out scores of the aligned model and of the base (the parent with the template's tokens), bits per
    byte on the base's pretraining holdout (the parent's own, with its own tokenizer), and replies to
    `align.prompts` from both, through the chat template; their energy recorded on the run (`energy/evaluate/...`)."""
    from tokenizers import Tokenizer

    from foundry.align.evaluation import heldout_scores
    from foundry.data.hydrate import hydrate_version
    from foundry.energy.tracked import measured
    from foundry.pretrain.holdout_metrics import holdout_metrics
    from models.chat import saved_template
    from models.generate import Sampling, generate_replies
    from models.gpt import gpt_from_saved, load_gpt, load_saved

    with measured(run, "evaluate", config.energy):
        e, manifest = config.evaluation, DatasetManifest.read(data_dir)
        tokenizer, scores, replies = Tokenizer.from_file(str(data_dir / "tokenizer.json")), {}, {}
        chats = [[{"role": "user", "content": p}] for p in config.align.prompts]
        for who, path in (("base", Path(base.weights)), ("aligned", checkpoint)):
            saved = load_saved(path)
            model = gpt_from_saved(saved)
            scores[who] = heldout_scores(model, data_dir, manifest, e.batch_size)
            template = saved_template(saved)
            replies[who] = generate_replies(
                model, tokenizer, template, chats, Sampling(config.align.max_new_tokens, top_k=1)
            )
        if parent.pretrain_data is not None:  # else the gate's forgetting check fails: nothing to compare on
            pretrain = hydrate_version(parent.pretrain_data, run.home)
            for who, model, tokens in (
                ("base", load_gpt(parent.weights), Path(parent.tokenizer)),
                ("aligned", load_gpt(checkpoint), data_dir / "tokenizer.json"),
            ):
                scored = holdout_metrics(model, tokens, pretrain, e.batch_size, e.max_tokens, e.window_overlap)
                scores[who]["pretrain_bits_per_byte"] = scored.bits_per_byte
    metrics = AlignmentMetrics.model_validate(scores)
    tracking.log_metrics(run.run_id, metrics.as_mlflow())
    table = {"prompt": config.align.prompts, "base": replies["base"], "aligned": replies["aligned"]}
    tracking.client().log_table(run.run_id, table, "evaluation/generations.json")
    get_run_logger().info("aligned beside base: %s", {k: round(v, 4) for k, v in metrics.as_mlflow().items()})
    return metrics


@task(name="score-reproduced", cache_policy=NO_CACHE)
def score_reproduced(
    config: FoundryConfig, checkpoint: Path, data_dir: Path, pretrain: DataVersion | None, run: RunContext
) -> dict[str, float]:
    """A re-trained aligned model's own scores as `evaluate_aligned` scored the version it reproduces: its held-out
    conversations or pairs and, where the version records its base's pretraining data (`pretrain`), bits per byte
    on that holdout; logged on the run under the same keys (`align/<measure>`)."""
    from foundry.align.evaluation import heldout_scores
    from foundry.data.hydrate import hydrate_version
    from foundry.pretrain.holdout_metrics import holdout_metrics
    from models.gpt import gpt_from_saved, load_gpt, load_saved

    e, manifest = config.evaluation, DatasetManifest.read(data_dir)
    scores = heldout_scores(gpt_from_saved(load_saved(checkpoint)), data_dir, manifest, e.batch_size)
    if pretrain is not None:
        text = hydrate_version(pretrain, run.home)
        scored = holdout_metrics(
            load_gpt(checkpoint), data_dir / "tokenizer.json", text, e.batch_size, e.max_tokens, e.window_overlap
        )
        scores["pretrain_bits_per_byte"] = scored.bits_per_byte
    measured = AlignedScores.model_validate(scores).as_mlflow(AlignmentMetrics.PREFIXES["aligned"])
    tracking.log_metrics(run.run_id, measured)
    get_run_logger().info("reproduced: %s", {k: round(v, 4) for k, v in measured.items()})
    return measured


@task(name="judge", cache_policy=NO_CACHE)
def judge_aligned(config: FoundryConfig, candidate: Candidate) -> Decision:
    """The alignment gate: the base's scores on the same data beside the aligned model's, and the champion of
    `align.model_name` scored on the same held-out data (the caller holds its promotion lock)."""
    from foundry.align.gate import decide_alignment

    decision, run = decide_alignment(config, candidate), candidate.run
    tracking.set_tags(run.run_id, decision.run_tags())
    if decision.inputs.incumbent is not None:  # the champion it was held to, on this held-out data
        tracking.log_metrics(run.run_id, decision.inputs.incumbent.as_mlflow("incumbent"))
    return decision


@task(name="register", cache_policy=NO_CACHE)
def register_aligned(config: FoundryConfig, candidate: Candidate, decision: Decision, parent: ParentModel) -> Promotion:
    """Log the pyfunc model (its template inside `model.pt`) and publish it: a version with lineage, the gate's
    record and a model card, `challenger`, and `champion` when every check of the gate passed and
    `registry.auto_promote` is on; all of it or nothing (`versions.publish`)."""
    from foundry.registry import versions
    from foundry.registry.lineage import version_tags
    from foundry.reports.cards import alignment_card
    from foundry.serving.package import log_model

    c, run, metrics = candidate, candidate.run, candidate.metrics
    uri = log_model(run.run_id, c.checkpoint, c.tokenizer, config.serving.model_dump())
    tracking.link_metrics(run.run_id, sorted(metrics.as_mlflow()), model_id=LoggedModelUri.parse(uri).model_id)
    git = tracking.run_git(tracking.client().get_run(run.run_id).data.tags)
    manifest = DatasetManifest.read(c.data_dir)
    tags = version_tags(config, run.run_id, c.data, manifest.source_digest, decision, git, parent.uri)
    tags = tags.with_align_method(config.align.method)
    if parent.pretrain_data is not None:  # what the next alignment from this version must not forget either
        tags = tags.with_pretrain_data(parent.pretrain_data.data_version, parent.pretrain_data.remote)
    card = alignment_card(config, manifest, metrics, decision, tags) + RunEnergy.read(run.dir).card_section()
    name = config.registry.model_name
    return versions.publish(
        uri, name, run.run_id, tags.as_tags(), decision.make_champion, decision.verdict, description=card
    )
