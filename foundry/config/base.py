"""What every config section shares: `foundry.core.config_section.ConfigSection`, by the name the config's modules
import it as (a workload's own section derives from it where it lives, in the core)."""

from __future__ import annotations

from foundry.core.config_section import ConfigSection

_Section = ConfigSection
