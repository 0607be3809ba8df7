"""What a study leaves behind: one parent MLflow run for the study (found again when a re-run continues it),
a nested run per trial, the study's table and Optuna's plots on the parent, and the best config as YAML."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from foundry.config import FoundryConfig, to_yaml
from foundry.core import run_tags
from foundry.core.contracts import RunContext, SearchResult
from foundry.runtime import run_owner, tracking
from foundry.runtime.env import foundry_home
from foundry.search.study import (
    REASON_ATTR,
    RUN_ATTR,
    STEPS_ATTR,
    best_config,
    open_study,
    storage_url,
    study_dir,
    study_lock,
)

PLOTS = ("optimization_history", "param_importances", "parallel_coordinate", "intermediate_values")


@contextmanager
def study_run(config: FoundryConfig, run_name: str, tags: dict[str, str]) -> Iterator[tuple[RunContext, optuna.Study]]:
    """The study, opened under its lock, and its parent MLflow run; the run is marked FAILED if anything raises."""
    home = foundry_home()
    with study_lock(home, config.search):
        study, interrupted = open_study(config, home)
        for trial in interrupted:  # their nested runs were left RUNNING by the killed process
            if RUN_ATTR in trial.user_attrs:
                end_trial_run(trial.user_attrs[RUN_ATTR], "interrupted", ok=False)
        run_id = _parent_run(study, config, run_name, tags)
        run = RunContext(run_id=run_id, dir=home / "runs" / run_id, home=home)
        run.dir.mkdir(parents=True, exist_ok=True)
        ok = False
        try:
            yield run, study
            ok = True
        finally:
            tracking.end_run(run_id, ok)


def _parent_run(study: optuna.Study, config: FoundryConfig, run_name: str, tags: dict[str, str]) -> str:
    recorded = study.user_attrs.get(RUN_ATTR)
    if recorded and _run_exists(recorded):
        tracking.set_tags(recorded, {**tags, **run_owner.owner_tags()})  # first: a stale owner would be swept
        tracking.client().update_run(recorded, status="RUNNING")
        return recorded
    run_id = tracking.start_pipeline_run(config, run_name=f"search-{study.study_name}")
    search_tags = {run_tags.STAGE: "search", run_tags.SEARCH_STUDY: study.study_name}
    search_tags |= {run_tags.OPTUNA_VERSION: optuna.__version__}
    storage = {run_tags.SEARCH_STORAGE: storage_url(foundry_home(), config.search)}
    tracking.set_tags(run_id, {**search_tags, **storage, **tags})
    study.set_user_attr(RUN_ATTR, run_id)
    return run_id


def _run_exists(run_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    try:
        return tracking.client().get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise  # the tracking server failing is not "no run": fail closed


def start_trial_run(config: FoundryConfig, study: optuna.Study, trial: optuna.Trial, parent_id: str) -> str:
    """A nested run: the trial's whole config as params (the searched keys among them), tagged with its parent."""
    run_id = tracking.start_pipeline_run(config, run_name=f"{study.study_name}-trial-{trial.number}")
    tracking.set_tags(
        run_id,
        {
            run_tags.PARENT_RUN: parent_id,
            run_tags.STAGE: "search-trial",
            run_tags.SEARCH_STUDY: study.study_name,
            run_tags.SEARCH_TRIAL: str(trial.number),
        },
    )
    trial.set_user_attr(RUN_ATTR, run_id)
    return run_id


def end_trial_run(run_id: str, state: str, ok: bool) -> None:
    tracking.set_tags(run_id, {run_tags.SEARCH_STATE: state})
    tracking.end_run(run_id, ok)


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """The study's table: one row per trial, every searched key a column."""
    keys = sorted({k for t in study.trials for k in t.params})
    return [_row(t, keys) for t in study.get_trials(deepcopy=False)]


def _row(trial: FrozenTrial, keys: list[str]) -> dict[str, Any]:
    a = trial.user_attrs
    notes = ["baseline"] if a.get("baseline") else []
    if "retry_of" in a:
        notes.append(f"retry of {a['retry_of']}")
    if trial.state == TrialState.FAIL:
        notes.append(a.get(REASON_ATTR, "interrupted"))
    return {
        "trial": trial.number,
        "state": trial.state.name.lower(),
        "bits_per_byte": None if trial.value is None else round(trial.value, 5),
        **{key: trial.params.get(key) for key in keys},
        "steps": a.get(STEPS_ATTR),
        "train_seconds": a.get("train_seconds"),
        "pruned_at_step": a.get("pruned_at_step"),
        "note": "; ".join(notes),
        "mlflow_run_id": a.get(RUN_ATTR, ""),
    }


def study_plots(study: optuna.Study, folder: Path) -> dict[str, str]:
    """Optuna's matplotlib plots as PNGs (plotly's image export needs a download); {name: file or why not}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    for name in PLOTS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "experimental" on every call, and empty-study notes
            try:
                axes = getattr(plots, f"plot_{name}")(study)
            except (ValueError, RuntimeError) as exc:  # e.g. importances need two complete trials
                made[name] = f"not drawn: {exc}"
                continue
        figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        figure.set_size_inches(10, 5.5)
        figure.tight_layout()
        figure.savefig(folder / f"{name}.png", dpi=100)
        plt.close(figure)
        made[name] = f"{name}.png"
    return made


def record_study(config: FoundryConfig, study: optuna.Study, run: RunContext) -> tuple[SearchResult, list[dict]]:
    """Table, plots and best trial on the parent run; the best config written where `foundry run` can take it."""
    rows = trial_rows(study)
    client = tracking.client()
    if rows:
        import pandas as pd

        client.log_table(run.run_id, pd.DataFrame(rows), "search/trials.json")
    plots = study_plots(study, run.dir / "search_plots")
    tracking.log_artifact(run.run_id, run.dir / "search_plots", "search/plots")
    counts = Counter(r["state"] for r in rows)
    tracking.log_metrics(run.run_id, {f"search/trials_{state}": n for state, n in counts.items()})
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    best = min(complete, key=lambda t: t.value) if complete else None
    path = None
    if best is not None:
        path = write_best_config(config, study, best)
        tracking.log_artifact(run.run_id, path, "search")
        tracking.log_metrics(run.run_id, {"search/best_bits_per_byte": best.value})
        tracking.set_tags(
            run.run_id,
            {run_tags.SEARCH_BEST_TRIAL: str(best.number), run_tags.SEARCH_BEST_RUN: best.user_attrs.get(RUN_ATTR, "")},
        )
    tracking.set_tags(run.run_id, {run_tags.SEARCH_PLOT + name: made for name, made in plots.items()})
    result = SearchResult(
        study_name=study.study_name,
        storage=storage_url(foundry_home(), config.search),
        run_id=run.run_id,
        counts=dict(counts),
        best_number=best.number if best else None,
        best_value=best.value if best else None,
        best_params=best.params if best else {},
        best_config=path,
    )
    return result, rows


def write_best_config(config: FoundryConfig, study: optuna.Study, best: FrozenTrial) -> Path:
    path = study_dir(foundry_home(), config.search) / "best.yaml"
    header = (
        f"# The best trial ({best.number}) of study {study.study_name!r}: holdout {best.value:.4f} bits per byte.\n"
        f"# Written by `foundry search`; train it with: foundry run --config {path.name}\n"
    )
    staged = path.with_suffix(".yaml.tmp")
    staged.write_text(header + to_yaml(best_config(config, best)))
    staged.replace(path)  # a reader sees the previous best or this one, never half of one
    return path
