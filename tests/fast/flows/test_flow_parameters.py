"""The flows' parameters (flows/): what Prefect renders as each flow's form in the UI, from its signature and the
typed config, and the deployments that serve them."""

from __future__ import annotations

from foundry.config import FoundryConfig


def test_the_flow_parameter_is_the_config_form():
    """Prefect renders the flow's parameters from this schema: the config's sections and defaults."""
    from prefect.utilities.callables import parameter_schema

    from flows.train_pipeline import train_pipeline

    schema = parameter_schema(train_pipeline).model_dump()
    assert list(schema["properties"]) == ["config"]
    definitions = schema["definitions"]
    assert set(definitions["FoundryConfig"]["properties"]) == {
        "data",
        "image",
        "tokenizer",
        "model",
        "vision",
        "train",
        "checkpoint",
        "evaluation",
        "registry",
        "serving",
        "retrain",
        "align",
        "finetune",
        "merge",
        "energy",
        "search",
    }
    train = definitions["TrainConfig"]["properties"]
    assert train["max_steps"]["default"] == FoundryConfig().train.max_steps
    assert definitions["DataConfig"]["properties"]["on_error"]["enum"] == ["skip", "fail"]


def test_the_align_flow_takes_a_version_and_the_config_form():
    from prefect.utilities.callables import parameter_schema

    from flows.align import align

    schema = parameter_schema(align).model_dump()
    assert list(schema["properties"]) == ["model_uri", "config", "allow_purged"] and schema["required"] == ["model_uri"]
    align_section = schema["definitions"]["AlignConfig"]["properties"]
    assert align_section["method"]["enum"] == ["sft", "dpo"]
    assert align_section["beta"]["default"] == FoundryConfig().align.beta


def test_the_finetune_and_merge_flows_take_their_models_and_the_config_form():
    from prefect.utilities.callables import parameter_schema

    from flows.finetune import finetune
    from flows.merge import merge

    for flow, models in ((finetune, "model"), (merge, "models")):
        schema = parameter_schema(flow).model_dump()
        assert list(schema["properties"]) == [models, "config", "allow_purged"] and schema["required"] == [models]
        assert schema["definitions"]["FinetuneConfig"]["properties"]["method"]["enum"] == ["full", "lora"]
        assert "ties" in schema["definitions"]["MergeConfig"]["properties"]["method"]["enum"]


def test_the_search_deployment_shows_the_space_as_a_form():
    """Its parameter is the config: the UI renders `search.space` as a list of dimensions to edit."""
    from prefect.utilities.callables import parameter_schema

    from flows.deployments import DEPLOYMENTS
    from flows.search import search

    assert ("search", "flows/search.py:search", True) in {(d.name, d.entrypoint, d.takes_config) for d in DEPLOYMENTS}
    schema = parameter_schema(search).model_dump()
    assert list(schema["properties"]) == ["config"]
    definitions = schema["definitions"]
    assert definitions["SearchConfig"]["properties"]["space"]["items"] == {"$ref": "#/definitions/SearchParam"}
    dimension = definitions["SearchParam"]["properties"]
    assert set(dimension) == {"key", "distribution", "low", "high", "choices"}
    assert dimension["distribution"]["enum"] == ["log_uniform", "uniform", "int", "categorical"]
    default_space = schema["properties"]["config"]["default"]["search"]["space"]
    assert [d["key"] for d in default_space] == [p.key for p in FoundryConfig().search.space]


def test_the_evaluate_deployment_asks_for_models_data_and_the_config():
    from prefect.utilities.callables import parameter_schema

    from flows.deployments import DEPLOYMENTS
    from flows.evaluate import evaluate

    assert ("evaluate", "flows/evaluate.py:evaluate", True) in {
        (d.name, d.entrypoint, d.takes_config) for d in DEPLOYMENTS
    }
    schema = parameter_schema(evaluate).model_dump()
    assert list(schema["properties"]) == ["models", "data", "config", "allow_purged"]
    assert schema["required"] == ["models", "data"]


def test_the_flows_reading_a_version_show_allow_purged_off():
    """#55 point 6: a purged version is refused by the flow itself; the form's box to allow it is typed and off."""
    from prefect.utilities.callables import parameter_schema

    from flows.align import align
    from flows.evaluate import evaluate
    from flows.finetune import finetune
    from flows.merge import merge
    from flows.reproduce import reproduce

    for flow in (align, evaluate, finetune, merge, reproduce):
        schema = parameter_schema(flow).model_dump()
        assert schema["properties"]["allow_purged"] == {
            "default": False,
            "position": len(schema["properties"]) - 1,
            "title": "allow_purged",
            "type": "boolean",
        }
        assert "allow_purged" not in schema["required"]
