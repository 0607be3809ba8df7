"""The shared models the workloads' registrations add to (#54) keep the shapes they had when each was written by hand
(at 595bc18): `FoundryConfig`'s JSON schema (the Prefect form, field order too), `DatasetManifest`'s schema and the
bytes it writes for documents, chat records and images, and `foundry evaluate`'s `ModelScores` and `Evaluation`
(schemas and a dump holding every workload's scores). The values then are in `tests/fixtures/shared_shapes.json`,
written by `shapes()` below from the code of that commit; a field that moves, appears or goes changes one of them.
Rewritten by `shapes()` since, on purpose: #58 (the zpaq baselines: `evaluation.baselines`, their `HoldoutMetrics`
fields and `absent_baselines`, `Baselines.absent`); #59 (the config's `energy` section); #57
(`serving.max_request_s`); #59 (`image.workers`, `image.loader_workers`); #58 (`train.average_last`); #59
(`data.workers` 0 by default: one worker process a core); #59 (`image.decoded_cache_mb`); #58 (`align.sft_train.max_steps` 2,500, `align.beta` 0.5); #59 (the description of `image.decoded_cache_mb`); #58 (`train.max_steps` 2,000); #59 (the description of `image.decoded_cache_mb`: the loader workers idle).
params.yaml is the config's other face; `tests/fast/config` keeps it equal to the defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import REPO_ROOT
from helpers_manifests import CHAT, DOCUMENTS, IMAGES

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "shared_shapes.json"


def _evaluation() -> Any:
    """An evaluation that holds every workload's scores at once: every field of `ModelScores` is written."""
    from foundry.core.metrics.holdout import HoldoutMetrics
    from foundry.core.metrics.images import VisionMetrics
    from foundry.evaluate.scores import Baselines, Evaluation, EvaluationData, ModelRef, ModelScores

    try:  # where the workloads' own score types live since they are registered (#54)
        from foundry.align.fields import ChatScores
        from foundry.pretrain.fields import GroupScore
    except ImportError:  # before: evaluate's (the fixture's values were written from there)
        from foundry.evaluate.scores import ChatScores, GroupScore  # type: ignore[no-redef]

    ref = ModelRef(asked="models:/m@champion", model="models:/m/3", model_id="m-1", artifacts=Path("/models/m/3"))
    scores = ModelScores(
        model=ref,
        tokenizer="abcdef012345",
        metrics=HoldoutMetrics(bits_per_byte=1.25, loss=2.5, tokens=9, gzip_bits_per_byte=2.0),
        groups={"alpha": GroupScore(bits_per_byte=1.5, loss=2.0, tokens=4, bytes=10)},
        chat=ChatScores(exact_match=0.5, response_loss=1.5, records=2, note="n"),
        vision=VisionMetrics(accuracy=0.75, images=4, majority_accuracy=0.25, per_class_accuracy={"0": 1.0}),
        run_id="r2",
    )
    data = EvaluationData(
        asked="/d", dir=Path("/d"), data_version="a" * 32, remote="/r", source="/s", source_digest="b" * 64
    )
    baselines = Baselines(scores={"gzip": 2.0}, train_bytes=7, groups={"alpha": {"gzip": 2.5}})
    return Evaluation(data=data, holdout_bytes=10, baselines=baselines, models=[scores], run_id="r1", holdout_records=3)


def shapes(tmp: Path) -> dict[str, Any]:
    """The values the fixture holds, from the code imported now."""
    from foundry.config import FoundryConfig
    from foundry.data.manifest import DatasetManifest
    from foundry.evaluate.scores import Evaluation, ModelScores

    written = {}
    for name, raw in (("documents", DOCUMENTS), ("chat", CHAT), ("images", IMAGES)):
        path = DatasetManifest.model_validate(dict(reversed(raw.items()))).write(tmp / f"{name}.json")
        written[name] = path.read_text()
    evaluation = _evaluation()
    return {
        "config_schema": FoundryConfig.model_json_schema(),
        "manifest_schema": DatasetManifest.model_json_schema(),
        "manifests_written": written,
        "model_scores_schema": ModelScores.model_json_schema(),
        "evaluation_schema": Evaluation.model_json_schema(),
        "evaluation_dump": evaluation.model_dump_json(),
        "evaluation_dump_python": json.loads(json.dumps(evaluation.model_dump(mode="json"))),
    }


def _in_order(value: Any) -> Any:
    """`value` with each mapping as a list of its items: equality then sees the order of keys too."""
    if isinstance(value, dict):
        return [[key, _in_order(item)] for key, item in value.items()]
    if isinstance(value, list):
        return [_in_order(item) for item in value]
    return value


def test_each_shared_model_has_the_shape_it_had_when_written_by_hand(tmp_path):
    before = json.loads(FIXTURE.read_text())
    now = shapes(tmp_path)
    assert list(now) == list(before)
    for key, value in now.items():
        assert _in_order(value) == _in_order(before[key]), key


def test_the_comparison_sees_a_moved_field():
    """The check above fails when a field moves: `_in_order` keeps the order equality on dicts ignores."""
    a, b = {"data": 1, "image": 2}, {"image": 2, "data": 1}
    assert a == b and _in_order(a) != _in_order(b)
