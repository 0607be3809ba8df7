"""The workloads Foundry knows, as one plain table, and the tables derived from it.

Each workload is registered here once (`REGISTERED`): the module holding its `WORKLOAD`, named by path and imported
only when asked for (`foundry.core.workload.named`), the modality of its data, and the dataset kinds its manifests
carry. The config's `data.modality` values (`foundry.config.data`), the manifest's `modality` and `kind` values and
which modality each kind is (`foundry.data.manifest`), and which workload reads a manifest (`Workload.reads`) are
derived from it, so that a new workload adds one line here and no value to those tables. This module imports
nothing of Foundry: the config and the data layer read it without reaching the workloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Registration:
    """One workload: `module` holds its `WORKLOAD`; `modality`: what its data is, a value of `data.modality` (a
    config of that modality trains the workload named as it: `foundry.core.workload.for_config`); `kinds`: the
    dataset kinds its manifests carry, none of them another workload's."""

    module: str
    modality: str
    kinds: tuple[str, ...]


# name -> its registration; the order is the order `foundry.core.workload.for_data` asks them in
REGISTERED: dict[str, Registration] = {
    "image": Registration("foundry.vision.workload", "image", ("classification",)),
    "chat": Registration("foundry.align.workload", "text", ("chat", "preference")),
    "text": Registration("foundry.pretrain.workload", "text", ("text",)),
}


def _listed(table: Mapping[str, Registration]) -> list[Registration]:
    """The registrations in the order their values are listed (the config's form, the manifest's schema, errors):
    the reverse of the order the workloads are asked in, so that text, the default, comes first as it always has."""
    return list(reversed(table.values()))


def modalities(table: Mapping[str, Registration] = REGISTERED) -> tuple[str, ...]:
    """The data modalities, each once: `data.modality`'s values and a manifest's `modality`."""
    return tuple(dict.fromkeys(r.modality for r in _listed(table)))


def kinds(table: Mapping[str, Registration] = REGISTERED) -> tuple[str, ...]:
    """The dataset kinds a manifest may carry."""
    return tuple(kind for r in _listed(table) for kind in r.kinds)


def modality_of_kind(table: Mapping[str, Registration] = REGISTERED) -> dict[str, str]:
    """Each dataset kind's modality."""
    return {kind: r.modality for r in _listed(table) for kind in r.kinds}
