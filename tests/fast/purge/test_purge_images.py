"""`foundry purge` of an image data version: two planted images (noise patterns no digit is near, one in each
split) among 70 of scikit-learn's digits, prepared as WebDataset shards, committed to a real DVC workspace,
cache and local remote, and hydrated; an embedded MLflow store of the test's own with a version registered on
that data and a child of it. Found by pixel sha256 and by source path, then removed with `--apply`."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT, tracking_uri
from helpers_registry import register_tagged
from helpers_snapshots import Snapshot
from homes import seeded_mlflow_store
from PIL import Image

from foundry.cli import main
from foundry.config import load_config
from foundry.core.contracts import DataVersion
from foundry.data import purged
from foundry.data.hydrate import HydrationError, hydrate_version, verify_dataset
from foundry.purge import artifacts as purge_artifacts
from foundry.purge import home as purge_home
from foundry.purge import search
from foundry.runtime import tracking
from foundry.vision.decode import pixel_sha256
from foundry.vision.shards import ShardDataset

PER_CLASS = 7  # 70 digits: enough for both planted images to land in their splits
GRID = "misclassified.png"  # foundry.vision.evaluate: holdout images, pixels and all


@dataclass
class Images:
    home: Path
    data: DataVersion
    planted: dict[str, tuple[str, str]]  # split -> (pixel sha256, source path)
    runs: tuple[str, ...] = ()  # the runs of the version trained on the data and of its child

    @property
    def hydrated(self) -> Path:
        return self.home / "hydrated" / self.data.data_version


def _noise(prefix: str) -> np.ndarray:
    """An 8x8 noise image whose pixel sha256 starts with `prefix`: the smallest hashes go to the holdout."""
    rng = np.random.default_rng(7)
    while True:
        pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
        if pixel_sha256(pixels).startswith(prefix):
            return pixels


def rows(folder: Path) -> list[dict]:
    with open(folder / "images.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def members(shard: Path) -> list[tuple[str, str, bytes]]:
    """(member name, pixel sha256, PNG bytes) of each image a tar shard holds, decoded with Pillow."""
    found = []
    with tarfile.open(shard) as tar:
        for member in tar.getmembers():
            if member.name.endswith(".png"):
                data = tar.extractfile(member).read()
                found.append((member.name, pixel_sha256(np.array(Image.open(io.BytesIO(data)))), data))
    return found


@pytest.fixture(scope="module")
def image_home(tmp_path_factory):
    """A home holding one image data version with two planted images (and a near copy of one) in its workspace,
    DVC cache, remote and a hydrated copy, and an embedded MLflow store beside it with a version registered on that
    data and a child of it, the first's run holding a misclassified-images grid: (home, version, planted, config,
    source manifest, snapshot of the home, store). Built once: each test gets it back in place (`images`)."""
    from foundry.data.versioning import version_dataset
    from foundry.vision import builtin
    from foundry.vision.stage import acquire_images
    from tasks.data_parallel import run_prepare

    root = tmp_path_factory.mktemp("purge-images")
    digits = builtin.materialise("sklearn://digits", root / "sources")
    source = root / "source"
    for label in range(10):
        (source / str(label)).mkdir(parents=True)
        for png in sorted((digits / str(label)).glob("*.png"))[:PER_CLASS]:
            shutil.copyfile(png, source / str(label) / png.name)
    planted = {"holdout": ("7/zz-planted.png", _noise("00")), "train": ("3/zz-planted.png", _noise("ff"))}
    for name, pixels in planted.values():
        Image.fromarray(pixels, mode="L").save(source / name)
    near = planted["train"][1].copy()
    near[0, 0] = near[0, 0] ^ 1  # a near copy, dropped after it: the audit names both
    Image.fromarray(near, mode="L").save(source / "3" / "zzz-near-copy.png")
    overrides = [f"data.source={source}", "image.shard_images=16"]  # several train shards
    config = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", overrides)
    home, database = root / "home", root / "mlflow.db"
    from prefect.settings import PREFECT_HOME, temporary_settings

    with (
        pytest.MonkeyPatch.context() as patch,
        temporary_settings({PREFECT_HOME: root / "prefect"}),
        tracking_uri(patch, seeded_mlflow_store(database)),
    ):
        patch.setenv("FOUNDRY_HOME", str(home))
        manifest = acquire_images(config, root / "source_manifest.json")
        run_prepare(manifest, config, root / "prepared", progress=False)
        data = version_dataset(config, root / "prepared", manifest, home)
        table = {r["source"]: (r["sha256"], r["split"]) for r in rows(hydrate_version(data, home))}
        tags = {"data_version": data.data_version, "data.remote": data.remote}
        runs = [register_tagged(config, "digits", tags).run_id]
        runs.append(register_tagged(config, "digits-tuned", {"parent_model": "models:/digits@champion"}).run_id)
        # Plots as tasks/evaluation.py keeps and logs an image classifier's: the version's grid shows the planted
        # holdout image, its child's (fine-tuned elsewhere: no data version of its own here) other pixels.
        grids = {runs[0]: planted["holdout"][1], runs[1]: np.zeros((8, 8), np.uint8)}
        for run_id, grid in grids.items():
            plots = home / "runs" / run_id / "evaluation"
            plots.mkdir(parents=True)
            Image.fromarray(grid, mode="L").save(plots / GRID)
            Image.fromarray(np.full((8, 8), 128, np.uint8), mode="L").save(plots / "confusion_matrix.png")
            tracking.log_artifact(run_id, plots, "evaluation")
    found = {split: (table[name][0], name) for split, (name, _) in planted.items()}
    assert {split: table[name] for split, (name, _) in planted.items()} == {
        split: (pixel_sha256(pixels), split) for split, (_, pixels) in planted.items()
    }
    snapshot = Snapshot(root / "pristine", home)
    return home, data, found, config, root / "source_manifest.json", snapshot, database, tuple(runs)


@pytest.fixture()
def images(image_home, tmp_path, monkeypatch) -> Images:
    """The module's home put back as it was built (same paths: DVC and MLflow record them), $FOUNDRY_HOME, and
    its MLflow store copied to a path of the test's own (no engine MLflow cached holds the old file open)."""
    home, data, planted, _, _, snapshot, database, runs = image_home
    snapshot.restore()
    shutil.copy(database, tmp_path / "mlflow.db")
    monkeypatch.setenv("FOUNDRY_HOME", str(home))
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))  # DVC keys its index by the path
    from prefect.settings import PREFECT_HOME, temporary_settings

    with (
        temporary_settings({PREFECT_HOME: tmp_path / "prefect"}),
        tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"),
    ):
        yield Images(home, data, dict(planted), runs)


def plan(images: Images, kind: str, value: str) -> search.PurgePlan:
    return search.plan(images.home, search.Criterion(kind=kind, value=value), "a deletion request")


def file_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def test_the_dry_run_finds_the_image_in_every_file_and_place_and_every_model(images):
    before = file_digests(images.home)
    sha, name = images.planted["holdout"]
    found = plan(images, "document", sha)
    assert found.documents == (sha,) and found.unchecked == ()
    (hit,) = found.data_versions
    files = {f.file: f for f in hit.files}
    row = next(n for n, r in enumerate(rows(images.hydrated), 2) if r["sha256"] == sha)
    assert files["images.csv"].entries == (f"row {row}",)
    (shard,) = [f for f in hit.files if f.holds == "image"]
    assert shard.file.startswith("holdout-") and shard.entries[0].endswith("(verified)")
    member = shard.entries[0].split(": ")[1].split(",")[0]  # "row N: 00000012.png, 00000012.cls (verified)"
    assert [s for m, s, _ in members(images.hydrated / shard.file) if m == member] == [sha]
    assert len(files["ledger.csv"].entries) == len(files["ledger_minhash.npy"].entries) == 1
    train = {f.file: f.entries for f in plan(images, "document", images.planted["train"][0]).data_versions[0].files}
    (entry,) = train["audit.json"]  # "3/zzz-near-copy.png: repeats 3/zz-planted.png"
    assert entry.startswith("near_duplicate entry ")
    assert {c.place for c in hit.copies} == {
        "workspace cache",
        "hydration cache",
        "remote",
        "hydrated copy",
        "workspace",
    }
    assert {m.model for m in found.models} == {"models:/digits/1", "models:/digits-tuned/1"}
    assert plan(images, "source", name).documents == (sha,)
    assert file_digests(images.home) == before  # a dry run changes nothing


def test_a_regex_matches_labels_and_source_paths_only(images):
    planted = {sha for sha, _ in images.planted.values()}
    assert set(plan(images, "match", r"zz-planted").documents) == planted  # the source paths
    sevens = {r["sha256"] for r in rows(images.hydrated) if r["label"] == "7"}
    assert set(plan(images, "match", r"^7$").documents) == sevens  # a label
    assert plan(images, "match", "[0-9a-f]{64}").documents == ()  # never a sha256 nor the pixels


@pytest.mark.parametrize("kind", ["document", "source"])
def test_apply_removes_the_image_everywhere_and_keeps_every_other_byte_and_split(images, kind, capsys):
    old = images.hydrated
    sha, name = images.planted["train"]
    others = {r["sha256"]: r for r in rows(old) if r["sha256"] != sha}
    before = json.loads((old / "audit.json").read_text())["dropped"]
    pngs = {s: data for shard in sorted(old.glob("*.tar")) for _, s, data in members(shard)}
    value = sha if kind == "document" else name
    assert main(["purge", f"--{kind}", value, "--reason", "request 9", "--apply"]) == 0
    assert "verified" in capsys.readouterr().out
    new = purged.mark_of(images.home, images.data.data_version).replaced_by
    copy = hydrate_version(DataVersion(data_version=new, remote=images.data.remote), images.home)
    assert verify_dataset(copy) == []
    assert list(others) == [r["sha256"] for r in rows(copy)]  # every other image, in its order
    assert all(others[r["sha256"]] == r for r in rows(copy))  # its split, label and source
    shards = {s: data for shard in sorted(copy.glob("*.tar")) for _, s, data in members(shard)}
    assert shards == {s: pngs[s] for s in others}  # byte-identical PNGs, the planted one gone
    audit = json.loads((copy / "audit.json").read_text())["dropped"]
    assert audit["near_duplicate"]["images"] == before["near_duplicate"]["images"]  # counted still, its name gone
    assert len(audit["near_duplicate"]["named"]) == len(before["near_duplicate"]["named"]) - 1
    assert sum(1 for _ in ShardDataset(copy, "train")) == sum(r["split"] == "train" for r in others.values())
    planted_png = pngs[sha]
    for path in images.home.rglob("*"):  # caches, remote, hydrated copies, workspace: no member, no row
        if path.is_file():
            data = path.read_bytes()  # the record and its marks name the image by sha256 only: not there
            assert planted_png not in data, path
            # The acquire's fingerprint of the sources (names, source-bytes sha256) is not a data version's:
            # the purge leaves it, as for text (reported to the lead); every other file names it no more.
            assert path.name == "source_manifest.json" or name.encode() not in data, path
            assert {"purged", "mlflow"} & set(path.parts) or sha.encode() not in data, path
            if tarfile.is_tarfile(path):
                assert sha not in {s for _, s, _ in members(path)}, path
    with pytest.raises(HydrationError, match="purge"):
        hydrate_version(images.data, images.home)
    again = plan(images, "document", sha)
    assert (again.documents, again.data_versions, again.unchecked) == ((), (), ())
    assert plan(images, "source", name).documents == ()


def test_the_misclassified_grid_of_a_run_on_the_data_is_an_image_hit_and_apply_deletes_it(images, capsys):
    sha, _ = images.planted["holdout"]
    ours, child = images.runs
    found = plan(images, "document", sha)
    # The grid of the run trained on the data: not its confusion matrix, nor the grid of the child, which was
    # evaluated on data of its own; in the MLflow store and in the run's folder it was logged from.
    assert [(a.run_id, Path(a.path).name, a.strings) for a in found.artifacts if a.holds == "plot"] == [(ours, GRID, 1)]
    home_grids = [h.where for h in found.elsewhere if h.place == purge_home.GRID_PLACE]
    assert home_grids == [f"runs/{ours}/evaluation/{GRID}"]
    assert "image (derived plot: deleted whole)" in search.summary(found)
    assert main(["purge", "--document", sha, "--reason", "request 10", "--apply"]) == 0
    out = capsys.readouterr().out
    assert f"1 {purge_home.GRID_ARTIFACT}" in out and f"1 {purge_home.GRID_PLACE}" in out
    assert "verified: a second search finds none" in out
    store = images.home / "mlflow" / "artifacts"
    assert [purge_artifacts.run_of(p.relative_to(store)) for p in store.rglob(GRID)] == [child]
    assert len(list(store.rglob("confusion_matrix.png"))) == 2
    plots = images.home / "runs" / ours / "evaluation"
    assert not (plots / GRID).exists() and (plots / "confusion_matrix.png").is_file()
    assert (images.home / "runs" / child / "evaluation" / GRID).is_file()


def test_a_plan_written_when_a_plot_hit_held_image_reads_as_a_plot():
    """A plot hit was `holds: image` before it was named for what it is: a `--json` plan kept from then reads."""
    from foundry.purge.plan import ArtifactHit

    old = {"path": f"1/{'0' * 32}/artifacts/evaluation/{GRID}", "run_id": "0" * 32, "strings": 1, "holds": "image"}
    assert ArtifactHit.model_validate_json(json.dumps(old)).holds == "plot"
    assert ArtifactHit.model_validate({**old, "holds": "text"}).holds == "text"


def test_a_servers_grid_of_a_run_on_the_data_is_found_and_deleted_through_mlflows_repository(tmp_path):
    from foundry.purge import served

    ours, other = "0123456789abcdef0123456789abcdef", "f" * 32
    for run in (ours, other):  # an artifact location as a server keeps one (`file://`, as it would over http)
        plots = tmp_path / "artifacts" / run / "artifacts" / "evaluation"
        plots.mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8), np.uint8), mode="L").save(plots / GRID)
    location = (tmp_path / "artifacts").as_uri()
    needles = purge_artifacts.Needles(search.Criterion(kind="document", value="0" * 64), {}, set(), grid_runs={ours})
    (hit,), read, unchecked = served.scan({"1": ("pipeline", location)}, needles)
    assert (hit.path, hit.run_id, hit.holds, hit.store, read, unchecked) == (
        f"{location}/{ours}/artifacts/evaluation/{GRID}",
        ours,
        "plot",
        location,
        0,
        [],
    )
    assert served.rewrite(hit, needles) == 1 and served.rewrite(hit, needles) == 0
    assert [p.relative_to(tmp_path / "artifacts").parts[0] for p in tmp_path.rglob(GRID)] == [other]


def test_prepare_drops_a_purged_image_a_source_still_holds_and_counts_it_without_its_name(image_home, tmp_path):
    from foundry.core.contracts import SourceManifest
    from foundry.core.preparing import DataBasis
    from tasks.data_parallel import run_prepare

    _, _, planted, config, manifest, *_ = image_home
    sha, name = planted["train"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
        run_prepare(
            SourceManifest.read(manifest), config, tmp_path / "prepared", False, DataBasis(purged=frozenset({sha}))
        )
    assert sha not in {r["sha256"] for r in rows(tmp_path / "prepared")}
    audit = (tmp_path / "prepared" / "audit.json").read_text()
    assert json.loads(audit)["dropped"]["purged"] == {"images": 1, "named": []} and name not in audit
