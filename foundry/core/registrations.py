"""The workloads Foundry knows, as one plain table, and the tables derived from it.

Each workload is registered here once (`REGISTERED`): the module holding its `WORKLOAD`, named by path and imported
only when asked for (`foundry.core.workload.named`), the modality of its data, and the dataset kinds its manifests
carry, and the config sections only its runs read. The config's `data.modality` values (`foundry.config.data`), the manifest's `modality` and `kind` values and
which modality each kind is (`foundry.data.manifest`), and which workload reads a manifest (`Workload.reads`) are
derived from it, so that a new workload adds one line here and no value to those tables; the config checks a
section against the rest of it (`_Section.misfit`) in a config of the modality that reads it (`sections_read`). This module imports
nothing of Foundry: the config and the data layer read it without reaching the workloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Registration:
    """One workload: `module` holds its `WORKLOAD`; `modality`: what its data is, a value of `data.modality` (a
    config of that modality trains the workload named as it: `foundry.core.workload.for_config`); `kinds`: the
    dataset kinds its manifests carry, none of them another workload's; `sections`: the `FoundryConfig` sections
    only its runs read (a section another workload reads too, such as `tokenizer`, is not listed)."""

    module: str
    modality: str
    kinds: tuple[str, ...]
    sections: tuple[str, ...] = ()


# name -> its registration; the order is the order `foundry.core.workload.for_data` asks them in
REGISTERED: dict[str, Registration] = {
    "image": Registration("foundry.vision.workload", "image", ("classification",), ("image", "vision")),
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


def sections_read(modality: str, table: Mapping[str, Registration] = REGISTERED) -> tuple[str, ...]:
    """The config sections only runs on data of `modality` read: those a config of that modality checks against
    the rest of it (a section such a run does not read cannot misfit)."""
    return tuple(dict.fromkeys(s for r in _listed(table) if r.modality == modality for s in r.sections))
