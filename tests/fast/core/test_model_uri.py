"""foundry.core.model_uri: a registered version's URI (`models:/NAME/VERSION`, `models:/NAME@ALIAS`) and a logged
model's (`models:/m-<id>`, MLflow 3) parse into their parts, print back, and refuse anything else naming the forms:
a model URI read back from a tag names a folder, so `..` or a path in it must never get that far."""

from __future__ import annotations

import pytest

from foundry.core.model_uri import LoggedModelUri, ModelUri


@pytest.mark.parametrize(
    ("text", "name", "version", "alias"),
    [
        ("models:/foundry-gpt/3", "foundry-gpt", "3", None),
        ("models:/foundry-gpt@champion", "foundry-gpt", None, "champion"),
        ("models:/legal_v2-merged/12", "legal_v2-merged", "12", None),
    ],
)
def test_a_model_uri_parses_into_its_parts_and_prints_back(text, name, version, alias):
    uri = ModelUri.parse(text)
    assert (uri.name, uri.version, uri.alias) == (name, version, alias) and str(uri) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "runs:/abc/model",
        "models:/only-a-name",
        "models:/../x/3",
        "models:/a/../../3",
        "models:/a/3/4",
        "models:/a/x",
        "models:/a/²",
        "models:/a/3 ",
        "models:/a@",
        "models:/@champion",
        "models:/a@b/c",
        "models:/.hidden/1",
        "models:/a\\b/1",
        "models:/a\nb/1",
    ],
)
def test_a_malformed_model_uri_is_refused_naming_the_forms(text):
    with pytest.raises(ValueError) as refused:
        ModelUri.parse(text)
    assert repr(text) in str(refused.value) and "models:/NAME/VERSION or models:/NAME@ALIAS" in str(refused.value)


def test_a_resolved_version_names_its_folder():
    class Version:
        name, version = "foundry-gpt", 3

    assert str(ModelUri.of(Version)) == "models:/foundry-gpt/3" and ModelUri.of(Version).folder == "foundry-gpt-v3"
    with pytest.raises(ValueError, match="resolve it first"):
        _ = ModelUri.parse("models:/foundry-gpt@champion").folder


LOGGED = "models:/m-" + "0123456789abcdef" * 2


def test_a_logged_model_uri_parses_into_its_id_and_prints_back():
    uri = ModelUri.parse(LOGGED, logged=True)
    assert isinstance(uri, LoggedModelUri) and uri.model_id == LOGGED.removeprefix("models:/") and str(uri) == LOGGED
    assert LoggedModelUri.parse(LOGGED) == uri and LoggedModelUri.id_in(LOGGED) == uri.model_id
    assert ModelUri.parse("models:/m-abc/3", logged=True) == ModelUri(name="m-abc", version="3")  # a name like it


def test_a_logged_model_uri_is_not_a_registered_version():
    with pytest.raises(ValueError, match="is a logged model, not a registered version") as refused:
        ModelUri.parse(LOGGED)  # where a registered version is wanted
    assert "models:/NAME/VERSION or models:/NAME@ALIAS" in str(refused.value)


@pytest.mark.parametrize(
    "text",
    [
        "models:/m-",
        "models:/m-0123456789abcdef",  # too short
        LOGGED + "0",  # too long
        LOGGED.upper().replace("MODELS", "models"),  # MLflow writes lowercase hex
        LOGGED[:-1] + "g",
        LOGGED + "/",
        LOGGED + "\n",
        "runs:/" + LOGGED.removeprefix("models:/"),
        LOGGED.removeprefix("models:/"),
    ],
)
def test_a_malformed_logged_model_uri_is_refused(text):
    assert LoggedModelUri.id_in(text) is None
    with pytest.raises(ValueError, match="not a logged model"):
        LoggedModelUri.parse(text)
    with pytest.raises(ValueError):
        ModelUri.parse(text, logged=True)
