"""`foundry doctor` reports telemetry as each library decides it, DVC's from DVC's own config."""

from __future__ import annotations

from foundry.data.versioning import init_dvc
from foundry.ops.doctor import doctor, dvc_rows


def rows_by_name(rows) -> dict[str, tuple[bool, str]]:
    return {name: (ok, detail) for name, ok, detail in rows}


def set_analytics(workspace, value: bool) -> None:
    from dvc.repo import Repo

    with Repo(str(workspace)) as repo, repo.config.edit() as conf:
        conf["core"]["analytics"] = value


def test_every_library_says_its_telemetry_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    rows = rows_by_name(doctor())
    for name in (
        "telemetry MLflow",
        "telemetry Prefect client",
        "telemetry Prefect server",
        "telemetry Great Expectations",
        "telemetry DVC",
    ):
        assert rows[name][0] and rows[name][1].startswith("off: "), (name, rows[name])
    assert "telemetry DVC workspace config" not in rows  # no workspace yet: DVC's global and system config
    assert "global and system config" in rows["telemetry DVC"][1]


def test_the_dvc_rows_follow_dvcs_config_not_what_foundry_set(monkeypatch, tmp_path):
    workspace = tmp_path / "workspace"
    init_dvc(workspace, str(tmp_path / "remote")).close()  # as Foundry creates it: core.analytics false
    rows = rows_by_name(dvc_rows(workspace))
    assert rows["telemetry DVC"][0] and rows["telemetry DVC workspace config"] == (True, "off: core.analytics=False")

    set_analytics(workspace, True)  # someone turned it back on in the repo's config
    rows = rows_by_name(dvc_rows(workspace))
    assert rows["telemetry DVC workspace config"] == (False, "ON: core.analytics=True")  # a plain `dvc` there sends
    assert rows["telemetry DVC"][0]  # Foundry's processes still do not: DVC_NO_ANALYTICS

    monkeypatch.delenv("DVC_NO_ANALYTICS")
    assert not rows_by_name(dvc_rows(workspace))["telemetry DVC"][0]
    set_analytics(workspace, False)
    assert rows_by_name(dvc_rows(workspace))["telemetry DVC"][0]
