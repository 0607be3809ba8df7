"""Purge: Prefect artifacts scrubbed (for a slow test that runs under `prefect_harness`)."""

from __future__ import annotations

from pathlib import Path


def prefect_artifacts_scrubbed(home: Path) -> None:
    """Under a Prefect API (`prefect_harness`): a markdown and a table artifact holding a canary are found by
    `purge_home.scan` and rewritten through the API by `scrub` (the line dropped, the cell "[purged]"), an
    artifact without it is left as it was, and a second scan finds nothing."""
    import json

    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.client.orchestration import get_client

    from foundry.purge import artifacts as purge_artifacts
    from foundry.purge import home as purge_home
    from foundry.purge.plan import Criterion

    canary = "quokka marmalade prefect"
    needles = purge_artifacts.Needles(Criterion(kind="match", value=canary), {}, set())
    ids = {
        "markdown": create_markdown_artifact(f"# summary\nkept\nthe {canary}\n", key="purge-md", _sync=True),
        "table": create_table_artifact([{"a": "x", "b": f"the {canary}"}], key="purge-table", _sync=True),
        "clean": create_markdown_artifact("# nothing here\n", key="purge-clean", _sync=True),
    }
    hits = purge_home.scan(home, needles)
    assert {h.where for h in hits} >= {str(ids["markdown"]), str(ids["table"])}
    assert str(ids["clean"]) not in {h.where for h in hits}
    assert purge_home.scrub(home, needles, hits)["prefect artifact"] == len(hits)
    with get_client(sync_client=True) as client:
        data = {str(a.id): a.data for a in client.read_artifacts()}
    assert data[str(ids["markdown"])] == "# summary\nkept\n"
    assert data[str(ids["table"])] == json.dumps([{"a": "x", "b": "[purged]"}])
    assert data[str(ids["clean"])] == "# nothing here\n"
    assert purge_home.scan(home, needles) == []
