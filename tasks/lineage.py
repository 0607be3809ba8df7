"""Lineage: from a registered model back to its run, data version, source, code and config."""

from __future__ import annotations

import json

from tasks import registry, tracking

LINEAGE_TAGS = ("data_version", "data.remote", "data.source", "data.source_digest", "git_commit", "git_dirty")


def lineage(model_uri: str, depth: int = 10) -> list[dict]:
    """The model version's record, then its parent's (when it was fine-tuned from one), and so on."""
    version = registry.resolve(model_uri)
    tags = version.tags
    run = tracking.client().get_run(version.run_id)
    record = {
        "model": f"models:/{version.name}/{version.version}", "aliases": list(version.aliases or []),
        "run_id": version.run_id, "run_status": run.info.status,
        **{key: tags.get(key, "") for key in LINEAGE_TAGS},
        "parent_model": tags.get("parent_model", ""),
        "packages": {k.removeprefix("version."): v for k, v in run.data.tags.items() if k.startswith("version.")},
        "config": json.loads(tags["config"]) if "config" in tags else {},
        "holdout_bits_per_byte": tags.get("holdout/bits_per_byte", ""),
    }
    chain = [record]
    if record["parent_model"] and depth > 1:
        chain += lineage(record["parent_model"], depth - 1)
    return chain


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
            f"{indent}  code     commit {r['git_commit']}{' (dirty)' if r['git_dirty'] == 'true' else ''}",
            f"{indent}  packages {', '.join(f'{k} {v}' for k, v in sorted(r['packages'].items()))}",
            f"{indent}  config   train.max_steps={r['config'].get('train', {}).get('max_steps')} "
            f"model={json.dumps(r['config'].get('model', {}))}",
            f"{indent}  parent   {r['parent_model'] or 'none (trained from scratch)'}",
        ]
    return "\n".join(lines)
