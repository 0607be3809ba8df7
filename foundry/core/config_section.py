"""What every config section shares, the `foundry.config` sections and a workload's own alike.

It lives in the core, not in `foundry.config`, so that a workload's section module (named in its registration,
`foundry.core.registrations.Section`) can derive from it without importing `foundry.config`, whose import builds
`FoundryConfig` from the registered sections: the section module would then be imported while it is still being
imported. `foundry.config.base` names it `_Section`, as the config's own modules have always imported it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ConfigSection(BaseModel):
    # Unknown keys are typos, not extensions: reject them so a misspelt override never goes unnoticed. No value
    # of any section is infinite or NaN: `learning_rate: .inf` would train to NaN weights after the config passed.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    def misfit(self, config: Any) -> str | None:
        """What keeps this section from working with the rest of `config` (a `FoundryConfig`), in a run that reads
        it; None when nothing does. The config asks each section its modality's runs read
        (`foundry.core.registrations.sections_read`): a value they cannot train with fails when it loads."""
        return None
