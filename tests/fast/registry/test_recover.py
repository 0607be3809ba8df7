"""Half-published versions against a real MLflow store: the champion reads past them, and the next
publication of the model (the one place that recovers) withdraws them, giving the aliases back."""

from __future__ import annotations

import pytest

from foundry.registry import versions
from foundry.runtime import tracking


@pytest.fixture()
def run_id(tiny_config):
    return tracking.start_pipeline_run(tiny_config, run_name="recover-test")


def left_by_a_dead_run(name: str, run_id: str, replaces: str) -> str:
    """A version that took `challenger` and `champion` and died before it was marked complete."""
    marks = {versions.PUBLICATION: "pending", "foundry.replaces_champion": replaces}
    marks["foundry.replaces_challenger"] = replaces
    version = versions.register(f"runs:/{run_id}/none", name, run_id, marks)
    for which in versions.ALIASES:
        tracking.client().set_registered_model_alias(name, which, version)
    return version


def test_the_champion_is_the_last_version_whose_publication_completed(run_id):
    first = versions.publish(f"runs:/{run_id}/none", "rec-read", run_id, {}, True, "no champion yet")
    left_by_a_dead_run("rec-read", run_id, replaces=first.version)
    assert str(versions.champion("rec-read").version) == first.version


def test_the_next_publication_withdraws_what_a_dead_run_left(run_id):
    first = versions.publish(f"runs:/{run_id}/none", "rec-next", run_id, {}, True, "no champion yet")
    dead = left_by_a_dead_run("rec-next", run_id, replaces=first.version)
    versions.publish(f"runs:/{run_id}/none", "rec-next", run_id, {}, False, "refused")
    left = {str(v.version) for v in tracking.client().search_model_versions("name = 'rec-next'")}
    assert dead not in left and str(versions.alias("rec-next", "champion").version) == first.version
