"""A purged version refused by the flows themselves (#55 point 6), not only by the CLI: a deployment run started
from the Prefect UI with a purged version as its parameter stops before the flow's first task, unless its
`allow_purged` parameter is on. The `fleet` of tests/fast/purge/test_purge.py (embedded MLflow of the test's own).
No Prefect server: a flow let past the check stops at its first task, which finds no API to report to (the
whole flow under a real Prefect server: tests/slow/purge/test_purge_flow.py)."""

# ruff: noqa: F811  (the fixtures imported from test_purge are test arguments here)

from __future__ import annotations

import pytest
from test_purge import canary_home, fleet  # noqa: F401  (fixtures)

from foundry.config import FoundryConfig, load_config
from foundry.purge import record as purge_record
from foundry.registry.versions import PurgedModel, refuse_purged_versions
from foundry.runtime import tracking

RECORD = "purge-20260101T000000-0123abcd"
PURGED, OTHER = "models:/purge-canary/1", "models:/purge-other/1"


def _finetune(allow_purged: bool):
    from flows.finetune import finetune

    return finetune.fn(model=PURGED, config=FoundryConfig(), allow_purged=allow_purged)


def _merge(allow_purged: bool):
    from flows.merge import merge

    return merge.fn(models=[OTHER, PURGED], config=FoundryConfig(), allow_purged=allow_purged)


def _merge_base(allow_purged: bool):
    from flows.merge import merge

    config = load_config(None, [f"merge.base={PURGED}"])
    return merge.fn(models=[OTHER, OTHER], config=config, allow_purged=allow_purged)


def _align(allow_purged: bool):
    from flows.align import align

    return align.fn(model_uri=PURGED, config=FoundryConfig(), allow_purged=allow_purged)


def _evaluate(allow_purged: bool):
    from flows.evaluate import evaluate

    return evaluate.fn(models=[OTHER, PURGED], data="0" * 32, config=FoundryConfig(), allow_purged=allow_purged)


def _reproduce(allow_purged: bool):
    from flows.reproduce import reproduce

    return reproduce.fn(model_uri=PURGED, force=True, allow_purged=allow_purged)


@pytest.fixture()
def no_prefect_api():
    """No Prefect API and none started for the test: a task run fails at once, naming the missing API."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    with temporary_settings({PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}, restore_defaults={PREFECT_API_URL}):
        yield


@pytest.mark.parametrize(
    ("run", "refused"),
    [
        (_finetune, "fine-tuned"),
        (_merge, "merged"),
        (_merge_base, "merged"),
        (_align, "aligned"),
        (_evaluate, "evaluated"),
        (_reproduce, "reproduced"),
    ],
    ids=["finetune", "merge", "merge-base", "align", "evaluate", "reproduce"],
)
def test_each_flow_refuses_a_purged_version_unless_its_parameter_allows_it(fleet, no_prefect_api, run, refused):
    """Refused before the first task (none could run here); with `allow_purged` the flow goes on to its first
    task, which is where it stops without a Prefect API."""
    tracking.client().set_model_version_tag("purge-canary", "1", purge_record.TAG, RECORD)
    with pytest.raises(PurgedModel, match=f"purge record {RECORD}") as refusal:
        run(allow_purged=False)
    assert f"cannot be {refused}" in str(refusal.value) and "allow_purged=true" in str(refusal.value)
    with pytest.raises(ValueError, match="No Prefect API URL provided") as past:
        run(allow_purged=True)
    assert not isinstance(past.value, PurgedModel)


def test_the_check_reads_what_an_alias_names_now_and_fails_closed(fleet):
    """The flows' check and the CLI's are one function: an alias is followed; an absent version is named."""
    client = tracking.client()
    client.set_registered_model_alias("purge-canary", "kept", "1")  # `--keep-models` leaves an alias in place
    client.set_model_version_tag("purge-canary", "1", purge_record.TAG, RECORD)
    with pytest.raises(PurgedModel, match=RECORD):
        refuse_purged_versions([OTHER, "models:/purge-canary@kept"], "aligned")
    assert refuse_purged_versions(["models:/purge-canary@kept"], "aligned", allowed=True) is None
    assert refuse_purged_versions([OTHER], "aligned") is None
    with pytest.raises(LookupError, match="models:/purge-canary/9: the registry has no such version"):
        refuse_purged_versions(["models:/purge-canary/9"], "aligned")
