"""A bad value in one section is reported alone: the search space is not checked against a failed section (#30 point 8)."""

from __future__ import annotations

import pytest

from foundry.config import ConfigError, load_config

SPACE = (
    "search.space=[{key: train.learning_rate, distribution: log_uniform, low: 0.0001, high: 0.01},"
    " {key: model.n_layer, distribution: int, low: 1, high: 4}]"
)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("train.max_steps=-1", "train.max_steps = -1: Input should be greater than or equal to 1"),
        ("model.n_layer=0", "model.n_layer = 0: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_value_names_itself_only(bad, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [SPACE, bad])
    assert str(info.value) == f"invalid config: {message}"


def test_a_bad_dimension_is_still_reported_beside_a_bad_section():
    with pytest.raises(ConfigError) as info:
        load_config(None, [SPACE.replace("model.n_layer", "modle.n_layer"), "train.max_steps=-1"])
    assert str(info.value) == (
        "invalid config: train.max_steps = -1: Input should be greater than or equal to 1; "
        "search.space.1 (modle.n_layer): not a config key; searchable sections: model, train, tokenizer"
    )
