"""Moved to `foundry.core.contracts`. Kept because Prefect's cached `dataset` results (JSON) name their types by
this path (`foundry.contracts.DataVersion`): a home made before the move reads them through this module."""

from foundry.core.contracts import *  # noqa: F403
from foundry.core.contracts import DataVersion  # noqa: F401  (the cached result's type, named explicitly)
