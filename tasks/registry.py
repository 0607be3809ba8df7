"""Stage E, register and promote: a model version per pipeline run, `challenger` always,
`champion` only through the gate.

Registration is all or nothing: if tagging a fresh version fails, the version is deleted, so a
failed run never leaves a half-registered model behind.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tasks.tracking import client

log = logging.getLogger(__name__)

PIP_REQUIREMENTS = ["torch==2.13.0", "tokenizers>=0.23,<0.24", "pandas", "mlflow==3.17.2"]


def log_model(run_id: str, checkpoint: Path, tokenizer: Path) -> str:
    """Log the pyfunc model under the run; returns its model URI."""
    import warnings

    import mlflow
    import pandas as pd

    from tasks.pyfunc_model import GPTTextGenerator, signature

    with mlflow.start_run(run_id=run_id), warnings.catch_warnings():
        # The signature is explicit, so MLflow's advice to add type hints for inference does not apply.
        warnings.filterwarnings("ignore", message=".*type hints.*")
        info = mlflow.pyfunc.log_model(
            name="model", python_model=GPTTextGenerator(),
            artifacts={"checkpoint": str(checkpoint), "tokenizer": str(tokenizer)},
            signature=signature(), input_example=pd.DataFrame({"prompt": ["def main():"]}),
            pip_requirements=PIP_REQUIREMENTS,  # inferring them costs ~15 s
        )
    return info.model_uri


def register(model_uri: str, name: str, run_id: str, tags: dict[str, str], description: str = "") -> str:
    """A new version of `name` carrying `tags`; returns the version number."""
    c = client()
    try:
        c.get_registered_model(name)
    except Exception:
        c.create_registered_model(name, description="GPT-style language models trained by Foundry.")
    version = c.create_model_version(name, source=model_uri, run_id=run_id, description=description)
    try:
        for key, value in tags.items():
            c.set_model_version_tag(name, version.version, key, str(value))
    except Exception:
        c.delete_model_version(name, version.version)
        raise
    return str(version.version)


def champion(name: str):
    """The current champion's model version, or None."""
    try:
        return client().get_model_version_by_alias(name, "champion")
    except Exception:
        return None


def gate(challenger_bpb: float, champion_bpb: float | None, min_improvement: float) -> tuple[bool, str]:
    """Promote when there is no champion, or when the challenger is better by at least `min_improvement`."""
    if champion_bpb is None:
        return True, "no champion yet"
    if challenger_bpb <= champion_bpb - min_improvement and challenger_bpb < champion_bpb:
        return True, f"{challenger_bpb:.4f} beats champion's {champion_bpb:.4f} bits/byte"
    return False, f"{challenger_bpb:.4f} does not beat champion's {champion_bpb:.4f} bits/byte by {min_improvement}"


def promote(name: str, version: str, promote_it: bool, verdict: str, champion_bpb: float | None, auto: bool) -> dict:
    """Set `challenger` (always) and `champion` (when the gate says so and auto-promotion is on)."""
    c = client()
    c.set_registered_model_alias(name, "challenger", version)
    promoted = promote_it and auto
    if promoted:
        c.set_registered_model_alias(name, "champion", version)
    record = {
        "gate.verdict": verdict, "gate.passed": str(promote_it).lower(), "gate.promoted": str(promoted).lower(),
        "gate.champion_bits_per_byte": "" if champion_bpb is None else f"{champion_bpb:.6f}",
    }
    for key, value in record.items():
        c.set_model_version_tag(name, version, key, value)
    log.info("%s version %s: %s%s", name, version, verdict, " -> champion" if promoted else "")
    return {"promoted": promoted, "verdict": verdict}
