"""foundry.search: the space in the config, the study's bookkeeping across kills, seeding. A trial's training
(pruning, the time box): tests/slow/search/test_search_training.py; the whole flow:
tests/slow/search/test_search_flow.py."""

from __future__ import annotations

import optuna
import pytest
import yaml
from conftest import REPO_ROOT
from helpers_configs import tiny
from helpers_search import LR_ONLY, study_config
from optuna.trial import TrialState

from foundry.config import ConfigError, FoundryConfig, load_config
from foundry.search.study import (
    build_sampler,
    open_study,
    spent,
    study_lock,
    suggest,
    tell_failed,
    trial_config,
)

# --- the space -----------------------------------------------------------------------------------------


def test_the_space_parses_with_its_types_and_the_tiny_twin_searches_its_own_values():
    space = {p.key: p for p in FoundryConfig().search.space}
    assert space["model.n_layer"].bounds() == [2, 6] and type(space["model.n_layer"].low) is int
    assert space["train.learning_rate"].distribution == "log_uniform"
    assert all(width % FoundryConfig().model.n_head == 0 for width in space["model.n_embd"].choices)
    raw = yaml.safe_load((REPO_ROOT / "configs" / "tiny.yaml").read_text())["search"]
    config = tiny()
    assert [p.model_dump(exclude_defaults=True) for p in config.search.space] == raw["space"]
    assert (config.search.workers, config.search.n_trials) == (2, 4)


@pytest.mark.parametrize(
    ("dimension", "fragments"),
    [
        (
            "{key: model.n_embed, distribution: int, low: 1, high: 3}",
            ["search.space.0 (model.n_embed)", "not a config key"],
        ),
        ("{key: data.min_chars, distribution: int, low: 1, high: 3}", ["(data.min_chars)", "not searchable"]),
        ("{key: train.devices, distribution: int, low: 1, high: 2}", ["(train.devices)", "not searchable"]),
        (
            "{key: tokenizer.vocab_size, distribution: int, low: 300, high: 600}",
            ["(tokenizer.vocab_size)", "categorical"],
        ),
        (
            "{key: model.n_layer, distribution: int, low: 0, high: 3}",
            ["(model.n_layer)", "0 is not a value", "greater than"],
        ),
        (
            "{key: train.learning_rate, distribution: int, low: 1, high: 3}",
            ["(train.learning_rate)", "int distribution"],
        ),
        ("{key: train.strategy, distribution: categorical, choices: [ddp, zero]}", ["(train.strategy)"]),
        ("{key: model.dropout, distribution: categorical, choices: [0.1, 1.5]}", ["(model.dropout)", "1.5"]),
        ("{key: train.learning_rate, distribution: log_uniform, low: 0, high: 1}", ["search.space.0", "positive"]),
        ("{key: train.learning_rate, distribution: uniform, low: 0.1, high: 0.01}", ["search.space.0", "below high"]),
        ("{key: train.learning_rate, distribution: uniform, lo: 0.1, high: 0.2}", ["search.space.0", "'lo'", "low"]),
        ("{key: model.n_layer, distribution: normal, low: 1, high: 2}", ["search.space.0.distribution", "normal"]),
        ("{key: model.n_layer, distribution: categorical}", ["search.space.0", "choices"]),
    ],
)
def test_a_bad_dimension_is_refused_naming_its_key(dimension, fragments):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"search.space=[{dimension}]"])
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("search.n_trials=0", "no budget"),
        ("search.pruner=hyperband", "search.pruner"),
        ("search.workers=0", "search.workers"),
        ("search.sampler=grid", "search.sampler"),
        ("search.scheduler=localhost:8786", "search.scheduler"),
        ("search.bogus=1", "search.bogus: unknown key"),
    ],
)
def test_bad_search_settings_name_their_key(override, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        load_config(None, [override])


def test_the_same_key_twice_is_refused():
    dims = "{key: model.n_layer, distribution: int, low: 1, high: 2}"
    with pytest.raises(ConfigError, match="searched twice"):
        load_config(None, [f"search.space=[{dims}, {dims}]"])


# --- seeding and the study's bookkeeping ---------------------------------------------------------------


def _asked(config: FoundryConfig, seed: int, n: int = 8) -> list[dict]:
    search = config.search.model_copy(update={"seed": seed, "startup_trials": 3})
    study = optuna.create_study(sampler=build_sampler(search), direction="minimize")
    sequence = []
    for i in range(n):  # past the random start-up: TPE's suggestions then depend on the values told
        trial = study.ask()
        sequence.append(suggest(trial, search))
        study.tell(trial, float((i * 7) % 5))
    return sequence


def test_the_same_seed_gives_the_same_sequence_of_trials():
    config = FoundryConfig()
    first = _asked(config, seed=3)
    assert first == _asked(config, seed=3)
    assert first != _asked(config, seed=4)
    assert len({repr(sorted(p.items())) for p in first}) == len(first)  # and they are not one trial repeated


def test_a_reopened_study_fails_what_a_kill_interrupted_queues_it_again_and_counts_the_rest(tmp_path):
    config = study_config(tmp_path, "search.n_trials=3")
    study, interrupted = open_study(config, tmp_path)
    assert interrupted == []
    baseline = study.ask()  # the config's own values come first
    assert suggest(baseline, config.search) == {
        "train.learning_rate": 0.003,
        "model.n_layer": 1,
        "model.n_embd": 32,
        "tokenizer.vocab_size": 512,
    }
    study.tell(baseline, 3.5)
    invalid = study.ask()
    suggest(invalid, config.search)
    tell_failed(study, invalid, "invalid: n_embd ...")
    running = study.ask()
    params = suggest(running, config.search)
    assert spent(study) == 2

    # A new process opens the study, as a re-run after kill -9 does (the storage is all that survives).
    again, interrupted = open_study(config, tmp_path)
    assert [t.number for t in interrupted] == [running.number]
    states = [t.state for t in again.trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL, TrialState.FAIL, TrialState.WAITING]
    assert spent(again) == 2  # the interrupted trial does not count; the invalid one does
    retry = again.ask()
    assert suggest(retry, config.search) == params and retry.user_attrs["retry_of"] == running.number


def test_a_trial_killed_between_two_draws_is_retried_with_the_values_it_had(tmp_path):
    """The kill can land while a trial is drawing its values (CI saw one with only its learning rate)."""
    config = study_config(tmp_path, "search.baseline_first=false")
    study, _ = open_study(config, tmp_path)
    partial = study.ask()
    first = config.search.space[0]
    learning_rate = partial.suggest_float(first.key, first.low, first.high, log=True)

    again, interrupted = open_study(config, tmp_path)
    assert [t.number for t in interrupted] == [partial.number]
    retry = again.ask()
    drawn = suggest(retry, config.search)
    assert retry.user_attrs["retry_of"] == partial.number
    assert drawn[first.key] == learning_rate and set(drawn) == {p.key for p in config.search.space}


def test_a_continued_study_does_not_draw_its_first_trials_again(tmp_path):
    config = study_config(tmp_path, LR_ONLY, "search.baseline_first=false", "search.sampler=random")
    study, _ = open_study(config, tmp_path)
    first = [suggest(study.ask(), config.search) for _ in range(2)]
    for trial in study.trials:
        study.tell(trial.number, 1.0)
    again, _ = open_study(config, tmp_path)  # a new process: a new sampler, reseeded past the trials held
    assert suggest(again.ask(), config.search) not in first


def test_a_study_refuses_a_config_its_trials_would_not_compare_with(tmp_path):
    open_study(study_config(tmp_path), tmp_path)
    open_study(
        study_config(tmp_path, "search.n_trials=9", "search.workers=1", "search.seed=5"), tmp_path
    )  # budget: fine
    with pytest.raises(ConfigError, match=r"differs in: search\.trial_max_steps, train\.max_steps") as info:
        open_study(study_config(tmp_path, "train.max_steps=99", "search.trial_max_steps=7"), tmp_path)
    assert "search.study_name" in str(info.value)


def test_a_study_started_before_a_setting_existed_reads_it_as_its_default(tmp_path):
    from foundry.search.study import OBJECTIVE_ATTR

    study, _ = open_study(study_config(tmp_path), tmp_path)
    recorded = study.user_attrs[OBJECTIVE_ATTR]
    predated = ("qk_norm", "mlp_activation", "value_embeddings", "mtp_depth", "mtp_weight")
    for key in predated:  # as a study recorded before these settings existed holds it
        del recorded["model"][key]
    study.set_user_attr(OBJECTIVE_ATTR, recorded)
    open_study(study_config(tmp_path), tmp_path)  # the defaults: the same objective
    with pytest.raises(ConfigError, match=r"differs in: model\.qk_norm\)"):
        open_study(study_config(tmp_path, "model.qk_norm=true"), tmp_path)


def test_a_study_started_before_overlapping_windows_continues_only_without_them(tmp_path):
    from foundry.search.study import OBJECTIVE_ATTR

    study, _ = open_study(study_config(tmp_path), tmp_path)
    recorded = study.user_attrs[OBJECTIVE_ATTR]
    del recorded["evaluation"]["window_overlap"]  # its trials were scored in windows apart
    for section, recipe in (("retrain", "train"), ("finetune", "train"), ("align", "sft_train")):
        del recorded[section][recipe]["weight_decay"]  # the recipes set none then: a record reads them as null
    study.set_user_attr(OBJECTIVE_ATTR, recorded)
    with pytest.raises(ConfigError, match=r"differs in: evaluation\.window_overlap\)"):
        open_study(study_config(tmp_path), tmp_path)
    open_study(study_config(tmp_path, "evaluation.window_overlap=0"), tmp_path)  # as its trials were scored
    with pytest.raises(ConfigError, match=r"differs in: evaluation\.window_overlap, train\.weight_decay\)"):
        open_study(study_config(tmp_path, "train.weight_decay=0.3"), tmp_path)  # pretraining's own: it counts


def test_a_study_started_in_bf16_continues_only_in_bf16(tmp_path):
    """Its trials trained in bf16 on any CPU; `bf16-if-native` would train the next in fp32 on a CPU without bf16."""
    open_study(study_config(tmp_path, "train.precision=bf16-mixed"), tmp_path)
    with pytest.raises(ConfigError, match=r"differs in: train\.precision\)"):
        open_study(study_config(tmp_path, "train.precision=bf16-if-native"), tmp_path)
    open_study(study_config(tmp_path, "train.precision=bf16-mixed"), tmp_path)


def test_one_process_drives_a_study(tmp_path):
    search = study_config(tmp_path).search
    with study_lock(tmp_path, search):
        with pytest.raises(ConfigError, match="being run by another process"):
            with study_lock(tmp_path, search):
                pass
    with study_lock(tmp_path, search):  # released with its holder
        pass


def test_an_invalid_combination_fails_the_trial_config_naming_the_keys():
    config = tiny("search.space=[{key: model.n_head, distribution: categorical, choices: [2, 3]}]")
    with pytest.raises(ConfigError, match=r"n_embd \(32\) must be divisible by n_head \(3\)"):
        trial_config(config, {"model.n_head": 3})
    assert trial_config(config, {"model.n_head": 2}).model.n_head == 2


def test_trial_workers_start_with_the_flows_environment_not_dasks_pre_spawn_variables(monkeypatch):
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_ (and OMP_NUM_THREADS=1) in a worker before it starts it;
    training steps there took 1.2x as long (bench/worker_env.py)."""
    import os

    import dask
    from distributed import Client, LocalCluster

    from tasks.data_parallel import PRE_SPAWN_ENV, environment_kept, nanny_adds_nothing

    names = sorted(dask.config.get(PRE_SPAWN_ENV))
    assert "MALLOC_TRIM_THRESHOLD_" in names
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    expected = {name: os.environ.get(name) for name in names}
    with environment_kept(), dask.config.set(nanny_adds_nothing()):
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=None)
        with cluster, Client(cluster) as client:
            seen = client.submit(lambda: {name: os.environ.get(name) for name in names}).result()
    assert seen == expected and seen["MALLOC_TRIM_THRESHOLD_"] is None and seen["OMP_NUM_THREADS"] == "2"
