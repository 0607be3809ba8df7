"""What every config section shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    # Unknown keys are typos, not extensions: reject them so a misspelt override never goes unnoticed.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
