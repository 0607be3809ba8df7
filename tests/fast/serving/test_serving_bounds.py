"""The served model bounds every request before it generates: rows, each row's text and the sampling
parameters, against the limits saved with the version (`serving` in the config). A refusal is an
`MlflowException` of INVALID_PARAMETER_VALUE (the scoring server's HTTP 400) naming the field; a version
logged before there were limits serves with the defaults. Tiny models logged to the session's MLflow,
loaded through `mlflow.pyfunc.load_model` as a server loads them."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers_registry import new_run
from helpers_serving import tiny_served_files
from mlflow.exceptions import MlflowException

from foundry.config import load_config
from foundry.serving.package import LEAF, MODEL_CODE, log_model, signature
from models.request_limits import LIMITS

LIMITED = {"max_new_tokens": 8, "max_prompt_chars": 200, "max_rows": 3}
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "river stone"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_served_files(tmp_path_factory.mktemp("bounded"))


@pytest.fixture(scope="module")
def bounded(files):
    """The model logged with the config's `serving` limits set low, loaded as a server loads it."""
    import mlflow

    config = load_config(None, [f"serving.{key}={value}" for key, value in LIMITED.items()])
    uri = log_model(new_run("bounded"), *files[:2], config.serving.model_dump())
    return mlflow.pyfunc.load_model(uri)


@pytest.fixture(scope="module")
def unbounded_legacy(files):
    """The base model logged as versions were before the limits: no `model_config`."""
    import mlflow

    with mlflow.start_run(run_id=new_run("before-limits")):
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(LEAF),
            code_paths=[str(MODEL_CODE)],
            artifacts={"checkpoint": str(files[2]), "tokenizer": str(files[1])},
            signature=signature(),
        )
    return mlflow.pyfunc.load_model(info.model_uri)


def refusal(model, frame, params=None) -> str:
    with pytest.raises(MlflowException) as info:
        model.predict(frame, params=params)
    assert info.value.error_code == "INVALID_PARAMETER_VALUE" and info.value.get_http_status_code() == 400
    return info.value.message


def test_the_limits_travel_with_the_version(bounded):
    assert bounded.model_config == {**LIMITS, **LIMITED}
    assert bounded.metadata.get_params_schema().to_dict()[0] == {
        "name": "max_new_tokens",
        "type": "long",
        "default": LIMITED["max_new_tokens"],
        "shape": None,
    }


def test_prompts_and_chats_within_the_limits_are_answered(bounded):
    frame = pd.DataFrame({"prompt": ["river", "stone", None], "messages": [None, None, CHAT]})
    out = bounded.predict(frame, params={"max_new_tokens": LIMITED["max_new_tokens"], "temperature": 0, "top_k": 0})
    assert len(out["completion"]) == 3 and all(isinstance(text, str) for text in out["completion"])


@pytest.mark.parametrize(
    ("frame", "params", "named"),
    [
        (pd.DataFrame({"prompt": ["a"] * 4}), None, "rows: 4 rows; a request holds 1 to 3"),
        (pd.DataFrame({"prompt": pd.Series([], dtype=str)}), None, "rows: no rows with a `prompt` or `messages`"),
        (pd.DataFrame({"prompt": [None]}), None, "row 0: needs a prompt (text) or messages"),
        (pd.DataFrame({"text": ["river"]}), None, "rows: no rows with a `prompt` or `messages`"),
        (
            pd.DataFrame({"prompt": ["x" * 201]}),
            None,
            "row 0: prompt holds 201 characters; this version takes at most 200",
        ),
        (
            pd.DataFrame({"messages": [[{"role": "system", "content": "hi"}]]}),
            None,
            "row 0: messages hold no user turn",
        ),
        (pd.DataFrame({"messages": [[{"role": "user", "content": "stone " * 40}]]}), None, "row 0: messages holds 240"),
        (
            pd.DataFrame({"messages": [[{"role": "user", "content": "river " * 30}]]}),
            None,
            "row 0: messages: the conversation is",
        ),
        (
            pd.DataFrame({"prompt": ["a"]}),
            {"max_new_tokens": -5},
            "params.max_new_tokens = -5: must be between 1 and 8",
        ),
        (pd.DataFrame({"prompt": ["a"]}), {"max_new_tokens": 0}, "params.max_new_tokens = 0"),
        (pd.DataFrame({"prompt": ["a"]}), {"max_new_tokens": 9}, "params.max_new_tokens = 9"),
        (pd.DataFrame({"prompt": ["a"]}), {"max_new_tokens": 2**63 - 1}, "params.max_new_tokens = 9223372036854775807"),
        (pd.DataFrame({"prompt": ["a"]}), {"temperature": -1.0}, "params.temperature = -1.0: must be a number >= 0"),
        (pd.DataFrame({"prompt": ["a"]}), {"temperature": float("nan")}, "params.temperature = nan"),
        (pd.DataFrame({"prompt": ["a"]}), {"top_k": -1}, "params.top_k = -1: must be >= 1, or 0"),
    ],
)
def test_a_request_out_of_bounds_is_refused_naming_the_field(bounded, frame, params, named):
    assert named in refusal(bounded, frame, params)


def test_a_list_instead_of_rows_is_refused(bounded):
    """MLflow's schema enforcement makes a list into a frame of no rows, as it does a frame of unknown columns."""
    assert "rows: no rows with a `prompt` or `messages`" in refusal(bounded, ["river", "stone"])


def test_a_version_logged_before_the_limits_serves_with_the_defaults(unbounded_legacy):
    limit = LIMITS["max_new_tokens"]
    assert f"must be between 1 and {limit}" in refusal(
        unbounded_legacy, pd.DataFrame({"prompt": ["a"]}), {"max_new_tokens": limit + 1}
    )
    rows = pd.DataFrame({"prompt": ["a"] * (LIMITS["max_rows"] + 1)})
    assert f"a request holds 1 to {LIMITS['max_rows']}" in refusal(unbounded_legacy, rows)
    longest = pd.DataFrame({"prompt": ["river", "s" * LIMITS["max_prompt_chars"]]})
    out = unbounded_legacy.predict(longest, params={"max_new_tokens": 4})
    assert len(out) == 2 and all(isinstance(text, str) for text in out["completion"])
    longer = pd.DataFrame({"prompt": ["s" * (LIMITS["max_prompt_chars"] + 1)]})
    assert f"at most {LIMITS['max_prompt_chars']}" in refusal(unbounded_legacy, longer)
