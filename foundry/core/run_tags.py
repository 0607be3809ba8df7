"""The MLflow tags Foundry sets on its runs (beside the lineage a version shares with its run,
`foundry.core.version_tags`), their keys named here once.

The keys and values stay what runs of every earlier layout carry. MLflow's own keys (`mlflow.parentRunId`) are
named here too, so that no caller spells one; a tag read back on its own goes through `RunTags`' readers
(`parent_run_of`, `git_of`...) or `RunOwner` (the process that owns a run).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from foundry.core import version_tags as tag

FLOW_RUN = "prefect.flow_run_id"  # the Prefect flow run that started the MLflow run
STAGE = "foundry.stage"  # pipeline, retrain, finetune, align, merge, evaluate, reproduce, reregister, search...
PARENT_RUN = "mlflow.parentRunId"  # MLflow's: a nested run (an evaluated model, a search trial) under its flow's
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"  # MLflow's; runs before Foundry wrote it carried `git_commit`
HOST, PID, STARTED = "foundry.host", "foundry.pid", "foundry.pid_started"  # the process that owns the run
FAILURE = "foundry.failure"  # why a run was marked FAILED by someone other than its own process
REPLAY_SOURCE = "align.replay_source"  # the pretraining data an alignment replays
REPRODUCES = "foundry.reproduces"
RETRAINS = "foundry.retrains"  # the version a purge's retraining trains again
PARENT_DATA_VERSION = "parent_data_version"  # the data the parent was trained on (retraining, fine-tuning)
RETRAIN_SKIPPED = "retrain.skipped"  # `true`: no new documents, nothing trained
RESUMED_FROM_STEP = "resumed_from_step"
RESOLVED_PRECISION = "train.resolved_precision"  # what `train.precision` resolved to on the machine that trained
COMPILED = "train.compiled"  # `true` or `false`: whether it trained compiled (no C++ compiler: `false`)
AVERAGED_STEPS = "train.averaged_steps"  # how many final steps' weights the saved weights are the mean of
HOSTS = "train.hosts"  # every rank's host, in rank order, comma-separated (`foundry.training.hosts`)
WORLD_SIZES = "train.world_sizes"  # each world size a training ran at, in order, comma-separated: `2,1`
# A run's dataset input (MLflow's inputs, not run tags): the context MLflow reads, and the data's `source`
DATASET_CONTEXT = "mlflow.data.context"  # `training`, or `evaluation`
DATASET_SOURCE = "source"
# An evaluated model's run
EVALUATES = "foundry.evaluates"  # models:/NAME/VERSION
ASKED = "foundry.model_uri"  # the URI as asked (an alias), on an evaluated model's run
TOKENIZER = "foundry.tokenizer"
COMPARABLE = "foundry.comparable"
NOT_COMPARABLE = "foundry.not_comparable"  # why not
# A hyperparameter search's run and its trials' nested runs
SEARCH_STUDY = "search.study"
SEARCH_STORAGE = "search.storage"
SEARCH_TRIAL = "search.trial"
SEARCH_STATE = "search.state"
SEARCH_CORES = "search.cores"  # the CPU cores a trial ran on
SEARCH_BEST_TRIAL = "search.best_trial"
SEARCH_BEST_RUN = "search.best_run_id"
SEARCH_PLOT = "search.plot."  # then a plot's name
PACKAGE_VERSION = "version."  # then a package's name: the versions the run used (`version.torch`)
OPTUNA_VERSION = PACKAGE_VERSION + "optuna"


class RunTags(BaseModel):
    """What a flow's run is and where it came from; a field left empty is a tag the run does not carry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flow_run: str = ""
    stage: str = ""
    parent_model: str = ""  # models:/NAME/VERSION a retrain, fine-tune or alignment starts from
    align_method: str = ""
    replay_source: str = ""
    reproduces: str = ""
    retrains: str = ""
    reregistered_from: str = ""

    def as_tags(self) -> dict[str, str]:
        tags = {
            FLOW_RUN: self.flow_run,
            STAGE: self.stage,
            tag.PARENT_MODEL: self.parent_model,
            tag.ALIGN_METHOD: self.align_method,
            REPLAY_SOURCE: self.replay_source,
            REPRODUCES: self.reproduces,
            RETRAINS: self.retrains,
            tag.REREGISTERED_FROM: self.reregistered_from,
        }
        return {k: v for k, v in tags.items() if v}

    @staticmethod
    def parent_run_of(tags: Mapping[str, str]) -> str | None:
        """The run a nested run (a search's trial, an evaluated model) sits under, from its tags (`run.data.tags`):
        MLflow's `mlflow.parentRunId`; None when it is not nested."""
        return tags.get(PARENT_RUN)

    @staticmethod
    def git_of(tags: Mapping[str, str]) -> dict[str, str]:
        """{"git_commit", "git_dirty"} as a run recorded them: MLflow's commit field, else the `git_commit` tag
        runs carried before; "unknown" where neither is there."""
        commit = tags.get(MLFLOW_GIT_COMMIT) or tags.get(tag.GIT_COMMIT, "unknown")
        return {tag.GIT_COMMIT: commit, tag.GIT_DIRTY: tags.get(tag.GIT_DIRTY, "unknown")}

    @staticmethod
    def replay_source_of(tags: Mapping[str, str]) -> tag.Tag:
        """The pretraining data version an alignment run replayed windows of ('' or absent: none, or a run from
        before the tag)."""
        return tag.Tag(REPLAY_SOURCE, tags.get(REPLAY_SOURCE))

    @staticmethod
    def resolved_precision_of(tags: Mapping[str, str]) -> str | None:
        """What `train.precision` resolved to where the run trained; None for runs from before the tag."""
        return tags.get(RESOLVED_PRECISION)

    @staticmethod
    def trained_uncompiled(tags: Mapping[str, str]) -> bool:
        """Whether the run recorded it trained uncompiled (no C++ compiler where it ran)."""
        return tags.get(COMPILED) == "false"


class RunOwner(BaseModel):
    """The process that owns a run, as the run records it (`foundry.runtime.run_owner`): its host, its process
    id and the process's start time (seconds since the epoch, as text). Empty: a tag the run does not carry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = ""
    pid: str = ""
    started: str = ""

    def as_tags(self) -> dict[str, str]:
        return {HOST: self.host, PID: self.pid, STARTED: self.started}

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> RunOwner:
        return cls(host=tags.get(HOST, ""), pid=tags.get(PID, ""), started=tags.get(STARTED, ""))
