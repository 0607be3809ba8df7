"""What `foundry purge --apply` leaves a purged model version: no alias at all (`champion`, `challenger`), so no
`models:/NAME@ALIAS` serves it; `foundry serve-model` and `foundry promote` refuse it naming the purge record
unless the user says so (`--allow-purged`, after `--keep-models`). And an MLflow artifact of a kind the purge
cannot read makes `--apply` refuse, naming it. The `fleet` of tests/fast/purge/test_purge.py: real DVC remote, embedded
MLflow of the test's own; no server, no training."""

# ruff: noqa: F811  (the fixtures imported from test_purge are test arguments here)

from __future__ import annotations

import gzip

import pytest
from test_purge import (  # noqa: F401  (fixtures: `fleet` and those it is built from)
    CANARY,
    apply,
    canary_home,
    digests,
    fleet,
    registered_fleet,
    without_the_unreadable_version,
)

from foundry.cli import main
from foundry.cli.common import refuse_purged
from foundry.purge import record as purge_record
from foundry.registry.versions import PurgedModel
from foundry.runtime import tracking

RECORD = "purge-20260101T000000-0123abcd"


def test_apply_takes_every_alias_and_serve_and_promote_refuse_naming_the_record(fleet, capsys):
    without_the_unreadable_version(fleet)
    client = tracking.client()
    assert set(client.get_model_version("purge-canary", "1").aliases) == {"champion", "challenger"}
    record = apply(fleet, match=CANARY)
    canary, child = (client.get_model_version(name, "1") for name in ("purge-canary", "purge-child"))
    assert canary.aliases == child.aliases == []  # challenger too: `models:/purge-canary@challenger` is gone
    assert record.lost_champion == ("models:/purge-canary/1", "models:/purge-child/1")
    capsys.readouterr()
    assert main(["serve-model", "models:/purge-canary/1"]) == 1
    assert main(["promote", "models:/purge-canary/1", "--reason", "looks fine"]) == 1
    err = capsys.readouterr().err
    assert err.count(record.record) == 2 and "cannot be served" in err and "--allow-purged" in err
    assert "cannot be promoted" in err


def test_serve_model_refuses_a_purged_version_kept_serving_unless_allowed(fleet, capsys):
    """After `--keep-models` the version keeps its aliases: serving it through one still needs --allow-purged."""
    tracking.client().set_model_version_tag("purge-canary", "1", purge_record.TAG, RECORD)
    assert main(["serve-model", "models:/purge-canary@challenger"]) == 1
    assert f"purge record {RECORD}" in capsys.readouterr().err
    with pytest.raises(PurgedModel, match=RECORD):
        refuse_purged(["models:/purge-canary@champion"], allowed=False, refused="served")
    assert refuse_purged(["models:/purge-canary@champion"], allowed=True, refused="served") is None
    assert refuse_purged(["models:/purge-other/1"], allowed=False, refused="served") is None  # not purged: as before


@pytest.mark.parametrize(
    ("command", "refused"),
    [
        (["export", "models:/purge-canary/1", "--format", "hf", "--out", "OUT"], "exported"),
        (["finetune", "models:/purge-canary/1"], "fine-tuned"),
        (["merge", "models:/purge-other/1", "models:/purge-canary/1"], "merged"),
        (["merge", "models:/purge-other/1", "models:/purge-other/1", "--base", "models:/purge-canary/1"], "merged"),
        (["align", "models:/purge-canary/1"], "aligned"),
        (["evaluate", "models:/purge-canary/1", "--data", "0" * 32], "evaluated"),
        (["reproduce", "models:/purge-canary/1"], "reproduced"),
    ],
    ids=["export", "finetune", "merge", "merge-base", "align", "evaluate", "reproduce"],
)
def test_every_command_that_reads_a_version_refuses_a_purged_one(fleet, tmp_path, capsys, command, refused):
    """#55 point 6: not only serve-model and promote. Refused before anything runs: no flow, no file written."""
    tracking.client().set_model_version_tag("purge-canary", "1", purge_record.TAG, RECORD)
    out = tmp_path / "export"
    assert main([part.replace("OUT", str(out)) for part in command]) == 1
    err = capsys.readouterr().err
    assert f"purge record {RECORD}" in err and f"cannot be {refused}" in err and "--allow-purged" in err
    assert not out.exists()


def test_apply_refuses_an_artifact_it_cannot_read_naming_it(fleet, tmp_path, capsys):
    without_the_unreadable_version(fleet)
    planted = tmp_path / "x.tsv.gz"
    planted.write_bytes(gzip.compress(f"id\ttext\n1\t{CANARY}\n".encode()))
    tracking.log_artifact(fleet.run_id, planted, "data")
    before = digests(fleet.home)
    assert main(["purge", "--match", CANARY, "--reason", "request 17", "--apply"]) == 2
    assert f"{fleet.run_id}/artifacts/data/x.tsv.gz" in capsys.readouterr().err
    assert digests(fleet.home) == before
