"""The Optuna study behind `foundry search`: where it is stored, how it samples and prunes, and how a
re-run after a kill continues it.

A study lives in a journal file under `$FOUNDRY_HOME/search/<study>/` (every change is one appended,
fsynced line, so a kill loses at most the line being written) or in a database the config names. One
process drives a study at a time (a lock the kernel releases when its holder dies, even by kill -9), so
a trial still RUNNING when that process opens the study was interrupted: it is marked failed and the
values it had drawn are queued to be tried again (a kill between two draws leaves some: the sampler draws
the rest). It does not count against `search.n_trials`; every other
finished trial does, so the total adds up over any number of re-runs.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from foundry.config import ConfigError, FoundryConfig, as_recorded
from foundry.config.search import SearchConfig, base_values
from foundry.core.redact import reveal

OBJECTIVE_ATTR = "foundry.objective"  # study: the settings every trial's result depends on
REASON_ATTR = "fail_reason"  # trial: why the study failed it (invalid config, divergence, an error)
RUN_ATTR = "mlflow_run_id"  # trial: its nested MLflow run; study: the parent run
STEPS_ATTR = "steps"  # trial: optimizer steps trained (a time-boxed trial's length)
# Settings of the search that decide what a trial computes; the others (budget, workers, sampler,
# pruner, seed) may change between re-runs of one study.
OBJECTIVE_SEARCH_KEYS = ("space", "trial_max_steps", "trial_time_s", "val_every_n_steps")


def study_dir(home: Path, search: SearchConfig) -> Path:
    return home / "search" / search.study_name


def storage_url(home: Path, search: SearchConfig) -> str:
    return search.storage or str(study_dir(home, search) / "journal.log")


def open_storage(url: str) -> optuna.storages.BaseStorage | str:
    """A database URL as Optuna takes it, or a journal file (created with its folder)."""
    if "://" in url:
        return reveal(url, "search.storage")
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    path = Path(url).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    # A holder killed mid-append leaves its lock file: after 10 s of no change it is taken over, not waited on.
    return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path), grace_period=10)))


def build_sampler(search: SearchConfig, offset: int = 0) -> optuna.samplers.BaseSampler:
    """Seeded: a new study suggests the same trials for the same seed. `offset` (the trials a study already
    holds) keeps a continued study from drawing its first random trials again."""
    seed = search.seed + offset
    if search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=search.startup_trials)


def build_pruner(search: SearchConfig) -> optuna.pruners.BasePruner:
    if search.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=search.pruner_startup_trials, n_warmup_steps=search.pruner_warmup_steps
        )
    if search.pruner == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=search.pruner_warmup_steps or "auto")
    return optuna.pruners.NopPruner()


@contextmanager
def study_lock(home: Path, search: SearchConfig) -> Iterator[None]:
    """One process drives a study: then a RUNNING trial found at the start is one a killed run left."""
    folder = study_dir(home, search)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "driver.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"study {search.study_name!r} is being run by another process; wait for it, "
                "or name another with --set search.study_name=..."
            ) from None
        yield


def objective_settings(config: FoundryConfig) -> dict[str, Any]:
    """What a trial's result depends on: the whole config but the search's own operating settings."""
    settings = config.model_dump(mode="json")
    search = settings.pop("search")
    settings["search"] = {key: search[key] for key in OBJECTIVE_SEARCH_KEYS}
    return settings


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value, sort_keys=True)
    return flat


def open_study(config: FoundryConfig, home: Path) -> tuple[optuna.Study, list[FrozenTrial]]:
    """Create the study or continue it; returns it and the trials a killed run left, now failed and queued again."""
    search = config.search
    study = optuna.create_study(
        storage=open_storage(storage_url(home, search)),
        study_name=search.study_name,
        direction="minimize",
        load_if_exists=True,
        pruner=build_pruner(search),
    )
    _check_objective(study, config)
    interrupted = fail_interrupted(study)
    study.sampler = build_sampler(search, offset=len(study.trials))
    if not study.trials and search.baseline_first and (baseline := base_values(search, config)):
        study.enqueue_trial(baseline, user_attrs={"baseline": True})
    return study, interrupted


# A trial pretrains from random weights, so the recipes of runs from a parent (which a record made before a recipe
# key existed holds as null) do not change its result.
WARM_START_RECIPES = ("retrain.train.", "finetune.train.", "align.train.", "align.sft_train.", "align.dpo_train.")


def _check_objective(study: optuna.Study, config: FoundryConfig) -> None:
    settings = objective_settings(config)
    recorded = study.user_attrs.get(OBJECTIVE_ATTR)
    if recorded is None:
        study.set_user_attr(OBJECTIVE_ATTR, settings)
        return
    # A setting added since the study started reads there as a recorded config reads back: the value its trials
    # were run with (`as_recorded`: evaluation.window_overlap 0), else its default.
    before, now = _flat(objective_settings(FoundryConfig())) | _flat(as_recorded(recorded)), _flat(settings)
    keys = (k for k in before.keys() | now.keys() if not k.startswith(WARM_START_RECIPES))
    differ = sorted(k for k in keys if before.get(k) != now.get(k))
    if differ:
        raise ConfigError(
            f"study {study.study_name!r} was started with another config (differs in: {', '.join(differ)}); "
            "its trials would not compare: continue it with the same config, or name a new study "
            "with --set search.study_name=..."
        )


def fail_interrupted(study: optuna.Study) -> list[FrozenTrial]:
    """Trials left RUNNING by a killed run: failed (without a reason: they do not count) and queued again."""
    interrupted = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for trial in interrupted:
        study.tell(trial.number, state=TrialState.FAIL)
        # a kill between two draws leaves part of the values: the queued retry keeps them, the sampler fills in
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
    return interrupted


def spent(study: optuna.Study) -> int:
    """Trials that count against `search.n_trials`: all finished ones but those a kill interrupted."""
    return sum(
        t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        or (t.state == TrialState.FAIL and REASON_ATTR in t.user_attrs)
        for t in study.get_trials(deepcopy=False)
    )


def suggest(trial: optuna.Trial, search: SearchConfig) -> dict[str, Any]:
    """One value per dimension, from the sampler (or from the queue: the baseline, an interrupted trial)."""
    for p in search.space:
        if p.distribution == "categorical":
            trial.suggest_categorical(p.key, p.choices)
        elif p.distribution == "int":
            trial.suggest_int(p.key, int(p.low), int(p.high))  # type: ignore[arg-type]
        else:
            trial.suggest_float(p.key, p.low, p.high, log=p.distribution == "log_uniform")  # type: ignore[arg-type]
    return dict(trial.params)


def with_params(
    config: FoundryConfig, params: dict[str, Any], overrides: dict[str, Any] | None = None
) -> FoundryConfig:
    """The config with dotted keys set, validated as a whole (a width its heads do not divide fails here)."""
    sections: dict[str, dict[str, Any]] = {}
    for key, value in {**params, **(overrides or {})}.items():
        section, _, name = key.partition(".")
        sections.setdefault(section, {})[name] = value
    return config.with_keys(**sections)


def trial_config(config: FoundryConfig, params: dict[str, Any]) -> FoundryConfig:
    """What a trial trains: the config, its suggested values and the search's per-trial settings."""
    search, overrides = config.search, {}
    if search.trial_max_steps:
        overrides["train.max_steps"] = search.trial_max_steps
    if search.val_every_n_steps:
        overrides["train.val_every_n_steps"] = search.val_every_n_steps
    return with_params(config, params, overrides)


def best_config(config: FoundryConfig, trial: FrozenTrial) -> FoundryConfig:
    """The config `foundry run` takes: the best trial's values, and its length when trials were time-boxed."""
    overrides = {"train.max_steps": trial.user_attrs[STEPS_ATTR]} if config.search.trial_time_s else {}
    return with_params(config, trial.params, overrides)


def data_key(config: FoundryConfig) -> str:
    return json.dumps(config.tokenizer.model_dump(mode="json"), sort_keys=True)


def data_variants(config: FoundryConfig) -> list[FoundryConfig]:
    """One config per combination of the searched tokenizer values: each is a dataset, prepared once. Its
    context is the longest searched, so the validation gate checks a holdout window for every trial."""
    search = config.search
    tokenizer = [p for p in search.space if p.section == "tokenizer"]
    contexts = [int(v) for p in search.space if p.key == "model.block_size" for v in p.bounds()]
    block_size = max([config.model.block_size, *contexts])
    return [
        with_params(config, {p.key: v for p, v in zip(tokenizer, values)}, {"model.block_size": block_size})
        for values in itertools.product(*(p.choices for p in tokenizer))
    ]


def core_shares(workers: int) -> list[list[int]]:
    """The cores this process may use, split evenly between `workers` trials (shared round-robin if fewer)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    share = max(1, len(cores) // workers)
    return [[cores[(slot * share + i) % len(cores)] for i in range(share)] for slot in range(workers)]


def tell_outcome(study: optuna.Study, trial: optuna.Trial, outcome) -> None:
    """A finished trial's result, with how long it trained; a diverged one is failed, and counts."""
    trial.set_user_attr(STEPS_ATTR, outcome.steps)
    trial.set_user_attr("train_seconds", round(outcome.train_seconds, 2))
    if outcome.pruned_at_step is not None:
        trial.set_user_attr("pruned_at_step", outcome.pruned_at_step)
    if outcome.state == "complete":
        study.tell(trial, outcome.value)
    elif outcome.state == "pruned":
        study.tell(trial, state=TrialState.PRUNED)  # its value: the last validation it reported
    else:
        tell_failed(study, trial, outcome.state)


def tell_failed(study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
    trial.set_user_attr(REASON_ATTR, reason[:500])
    study.tell(trial, state=TrialState.FAIL)
