"""Lineage: from a registered model back to its run, data version, source, code and config."""

from __future__ import annotations

import json

from foundry import tracking
from foundry.registry import versions as registry

COMPARED = ("holdout/loss", "holdout/bits_per_byte", "holdout/perplexity")
LINEAGE_TAGS = ("data_version", "data.remote", "data.source", "data.source_digest", "git_commit", "git_dirty")


def lineage(model_uri: str, depth: int = 10) -> list[dict]:
    """The model version's record, then its parent's (when it was fine-tuned from one), and so on."""
    version = registry.resolve(model_uri)
    tags = version.tags
    run = tracking.client().get_run(version.run_id)
    record = {
        "model": f"models:/{version.name}/{version.version}",
        "aliases": list(version.aliases or []),
        "run_id": version.run_id,
        "run_status": run.info.status,
        **{key: tags.get(key, "") for key in LINEAGE_TAGS},
        "parent_model": tags.get("parent_model", ""),
        "packages": {k.removeprefix("version."): v for k, v in run.data.tags.items() if k.startswith("version.")},
        "config": json.loads(tags["config"]) if "config" in tags else {},
        "holdout_bits_per_byte": tags.get("holdout/bits_per_byte", ""),
        "remote_files": remote_files(version.run_id),
    }
    chain = [record]
    if record["parent_model"] and depth > 1:
        chain += lineage(record["parent_model"], depth - 1)
    return chain


def remote_files(run_id: str) -> list[dict]:
    """What the origin of each remote source file said when the run acquired it (URL or s3 URI, ETag,
    Last-Modified, when it was asked), from the run's source manifest; [] for runs that logged none."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        manifest = json.loads(mlflow.artifacts.load_text(f"runs:/{run_id}/data/source_manifest.json"))
    except (MlflowException, OSError):
        return []
    keys = ("name", "origin", "etag", "last_modified", "checked_at", "sha256")
    return [{k: e.get(k, "") for k in keys} for e in manifest.get("entries", []) if e.get("origin")]


def format_lineage(chain: list[dict]) -> str:
    lines = []
    for i, r in enumerate(chain):
        indent = "  " * i
        aliases = f" @{', @'.join(r['aliases'])}" if r["aliases"] else ""
        lines += [
            f"{indent}{r['model']}{aliases}  holdout {r['holdout_bits_per_byte'] or '?'} bits/byte",
            f"{indent}  run      {r['run_id']} ({r['run_status']})",
            f"{indent}  data     version {r['data_version']} in {r['data.remote']}",
            f"{indent}  source   {r['data.source']} (content digest {r['data.source_digest'][:16]})",
            *(
                f"{indent}  fetched  {f['origin']} etag {f['etag'] or '-'} modified {f['last_modified'] or '-'} "
                f"checked {f['checked_at']}"
                for f in r.get("remote_files", [])
            ),
            f"{indent}  code     commit {r['git_commit']}{' (dirty)' if r['git_dirty'] == 'true' else ''}",
            f"{indent}  packages {', '.join(f'{k} {v}' for k, v in sorted(r['packages'].items()))}",
            f"{indent}  config   train.max_steps={r['config'].get('train', {}).get('max_steps')} "
            f"model={json.dumps(r['config'].get('model', {}))}",
            f"{indent}  parent   {r['parent_model'] or 'none (trained from scratch)'}",
        ]
    return "\n".join(lines)


class CommitMismatch(RuntimeError):
    """The code differs from the code that trained the model."""


def check_commit(record: dict, current: str, force: bool) -> None:
    """Reproduction is exact only at the commit that trained the model; elsewhere it needs `force`."""
    if record["git_commit"] != current and not force:
        raise CommitMismatch(
            f"{record['model']} was trained at commit {record['git_commit']}, this code is at {current}: "
            f"check out {record['git_commit']} to reproduce it exactly, or pass --force to re-train anyway"
        )


def compare(recorded_tags: dict[str, str], metrics: dict[str, float]) -> dict[str, tuple[float, float]]:
    """(recorded, reproduced) for each holdout metric the version recorded."""
    return {key: (float(recorded_tags[key]), round(metrics[key], 6)) for key in COMPARED if key in recorded_tags}


def identical(comparison: dict[str, tuple[float, float]]) -> bool:
    return all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in comparison.values())
