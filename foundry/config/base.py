"""What every config section shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    # Unknown keys are typos, not extensions: reject them so a misspelt override never goes unnoticed. No value
    # of any section is infinite or NaN: `learning_rate: .inf` would train to NaN weights after the config passed.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
