"""A run's artifact URI, `runs:/RUN_ID/PATH`, built and parsed in one place (`foundry.core.model_uri.RunsUri`),
and the glob a Prefect automation matches every model URI with."""

from __future__ import annotations

import re

import pytest

from foundry.core.model_uri import MODELS_GLOB, RunsUri

RUN = "0123456789abcdef" * 2


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (f"runs:/{RUN}/config.json", "config.json"),
        (f"runs:/{RUN}/data/source_manifest.json", "data/source_manifest.json"),
        (f"runs:/{RUN}", ""),
    ],
)
def test_a_runs_uri_parses_into_its_parts_and_prints_back(text, path):
    uri = RunsUri.parse(text)
    assert (uri.run_id, uri.path) == (RUN, path) and str(uri) == text
    assert str(RunsUri(run_id=RUN, path=path)) == text and RunsUri.run_id_in(text) == RUN


@pytest.mark.parametrize(
    "text",
    [
        "",
        f"models:/{RUN}/1",
        "runs:/",
        "runs:/abc/config.json",
        f"runs:/{RUN.upper()}/config.json",
        f"runs:/{RUN}0/config.json",
        f"runs:/{RUN}//config.json",
        f"runs:/{RUN}/../other/config.json",
        f"runs:/{RUN}/data/./x",
        f"runs:/{RUN}/data\\x",
        f"runs:/{RUN}/a\nb",
        f"runs:/{RUN}/data/",
    ],
)
def test_a_malformed_runs_uri_is_refused_naming_it(text):
    with pytest.raises(ValueError, match="is not a run's URI") as refused:
        RunsUri.parse(text)
    assert repr(text) in str(refused.value) and "runs:/RUN_ID/PATH" in str(refused.value)


def test_a_runs_uri_is_not_built_from_a_bad_run_id_or_path():
    with pytest.raises(ValueError, match="not a run id"):
        RunsUri(run_id="../x", path="config.json")
    with pytest.raises(ValueError, match="not a path among a run's artifacts"):
        RunsUri(run_id=RUN, path="/etc/passwd")


@pytest.mark.parametrize(
    "source",
    [
        f"runs:/{RUN}/model",
        f"runs:/{RUN}",
        f"runs:/{RUN}/../anything",  # gc keeps the run whatever follows it
        f"runs:/{RUN}0/model",
        f"runs:/{RUN[:-1]}/model",
        f"models:/m-{RUN}",
        "/mlruns/1/artifacts/model",
        "",
        None,
    ],
)
def test_the_run_a_versions_source_names_is_what_gcs_pattern_found(source):
    old = re.compile(r"runs:/([0-9a-f]{32})(/|$)").match(source or "")
    assert RunsUri.run_id_in(source) == (old.group(1) if old else None)


def test_the_models_glob_is_the_one_the_automation_always_matched():
    assert MODELS_GLOB == "models:/*"
