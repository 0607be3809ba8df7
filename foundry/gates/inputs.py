"""What each gate decides on: typed values the I/O gathers (registry look-ups, re-scored champions) and the
pure rules read. Each owns the `gate.*` tags that record its inputs on a registered version.

Every gate's inputs derive from `GateInputs` and name their gate in a `gate` field: that registers them in
`GATE_INPUTS`, and a `foundry.gates.decision.Decision` takes any of them (`foundry.core.open_union`), a new
workload's, defined in its own folder, too. The pretraining and specialist rules read any inputs derived from
`AgainstChampion` and `AgainstBase`, by the measure they name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from foundry.core import gate_tags
from foundry.core.contracts import _Value
from foundry.core.metrics.scores import AlignedScores
from foundry.core.open_union import Family

GATE_INPUTS = Family("gate inputs", discriminator="gate")


def _score(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


@dataclass(frozen=True)
class Measure:
    """What a gate compares and which way is better: text's bits per byte fall, images' accuracy rises."""

    name: str  # the field of the model's holdout metrics
    unit: str  # how verdicts name it
    higher_is_better: bool

    def worse_by(self, candidate: float, reference: float) -> float:
        """How much worse the candidate is than the reference (negative: better)."""
        return reference - candidate if self.higher_is_better else candidate - reference


BITS_PER_BYTE = Measure("bits_per_byte", "bits/byte", higher_is_better=False)
ACCURACY = Measure("accuracy", "accuracy", higher_is_better=True)


class GateInputs(_Value):
    """What every gate's inputs bring to a registered version's `gate.*` tags besides their own figures. A class
    that declares a `gate` field (`gate: Literal["pretrain"] = "pretrain"`) registers under its value."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "gate" in cls.__dict__.get("__annotations__", {}):
            GATE_INPUTS.register(cls.model_fields["gate"].default, cls)

    def check_tags(self, passed: dict[str, bool]) -> dict[str, str]:
        """The named checks' outcomes (`passed`: by check name) as tags; none here: the verdict names them."""
        return {}


class OldScores(_Value):
    """The forgetting guard's rule over any measure: `challenger` and `champion` on the champion's own holdout."""

    measure: ClassVar[Measure]
    data_version: str
    max_regression: float
    # When a purge removed the champion's own data (`foundry purge --apply --keep-models`): that version, and the
    # record; `data_version` is then the version the purge rewrote it into (same split, purged documents gone).
    replaces: str = ""
    purge_record: str = ""

    @property
    def purge_note(self) -> str:
        """What a verdict says of a holdout that replaced a purged one ('' for none)."""
        if not self.replaces:
            return ""
        return (
            f"its own data {self.replaces[:12]} was purged (purge record {self.purge_record}): scored on the "
            f"replacement {self.data_version[:12]}"
        )

    def purge_tags(self) -> dict[str, str]:
        return {gate_tags.OLD_HOLDOUT_REPLACES: self.replaces, gate_tags.OLD_HOLDOUT_PURGE: self.purge_record}

    @property
    def challenger(self) -> float:
        return getattr(self, f"challenger_{self.measure.name}")

    @property
    def champion(self) -> float:
        return getattr(self, f"champion_{self.measure.name}")

    @property
    def regression(self) -> float:
        return self.measure.worse_by(self.challenger, self.champion)

    @property
    def forgets(self) -> bool:
        return self.regression > self.max_regression


class OldHoldout(OldScores):
    """Challenger and champion scored on the champion's own holdout: the forgetting guard's inputs."""

    measure: ClassVar[Measure] = BITS_PER_BYTE
    challenger_bits_per_byte: float
    champion_bits_per_byte: float


class HoldoutScore(_Value):
    """The merge, the base and (on its own holdout) a specialist, scored on one model's holdout."""

    holdout_of: str  # models:/NAME/VERSION whose holdout this is
    data_version: str
    merged_bits_per_byte: float
    base_bits_per_byte: float
    specialist_bits_per_byte: float | None = None  # None on the base's own holdout
    incumbent_bits_per_byte: float | None = None  # the champion of the merge's name, when there is one


class _Scored(GateInputs):
    """Inputs whose challenger and champion are scored by one `measure`: what the pretraining rule reads."""

    measure: ClassVar[Measure] = BITS_PER_BYTE

    @property
    def challenger(self) -> float:
        return getattr(self, f"challenger_{self.measure.name}")

    @property
    def champion(self) -> float | None:
        return getattr(self, f"champion_{self.measure.name}")

    def tags(self) -> dict[str, str]:
        """The gate's inputs as `gate.*` tags, named by the measure (`gate.champion_bits_per_byte`...); a
        specialist's own champion first."""
        old, measure = self.old_holdout, self.measure.name
        return (
            self.incumbent_tags()
            | {
                gate_tags.challenger(measure): _score(self.challenger),
                gate_tags.champion(measure): _score(self.champion),
                gate_tags.CHAMPION_VERSION: self.champion_version or "",
                gate_tags.MIN_IMPROVEMENT: str(self.min_improvement),
                gate_tags.OLD_HOLDOUT_VERSION: "" if old is None else old.data_version,
                gate_tags.challenger_old(measure): "" if old is None else _score(old.challenger),
                gate_tags.champion_old(measure): "" if old is None else _score(old.champion),
                gate_tags.MAX_REGRESSION: "" if old is None else str(old.max_regression),
            }
            | ({} if old is None or not old.replaces else old.purge_tags())
        )

    def incumbent_tags(self) -> dict[str, str]:
        """A specialist's own champion as `gate.incumbent_*` tags; none while it has no champion."""
        if getattr(self, "incumbent_version", None) is None:
            return {}
        incumbent = getattr(self, f"incumbent_{self.measure.name}")
        return {
            gate_tags.INCUMBENT_VERSION: self.incumbent_version,
            gate_tags.incumbent(self.measure.name): _score(incumbent),
        }


class AgainstChampion(_Scored):
    """Inputs the pretraining rule (`foundry.gates.pretrain`) decides on, by their `measure`: the challenger and the
    champion of its name (`challenger_<measure>`, `champion_<measure>`), `min_improvement`, `auto_promote`,
    `champion_version`, `old_holdout` (an `OldScores`) and `footing`; each subclass declares them."""


class AgainstBase(_Scored):
    """Inputs the specialist rule (`foundry.gates.specialist`) decides on, by their `measure`: as `AgainstChampion`
    (the `champion_*` fields hold the base's scores) with `base`, `incumbent_version` and `incumbent_<measure>`, the
    specialist's own champion; each subclass declares them."""


class _HoldoutInputs(_Scored):
    """A challenger's bits per byte on its holdout beside a reference model's (the champion, or a base)."""

    challenger_bits_per_byte: float
    min_improvement: float
    auto_promote: bool  # a challenger that passes becomes champion now, else a reviewer decides
    champion_version: str | None = None  # None: nothing to compare with
    champion_bits_per_byte: float | None = None  # on the challenger's holdout; None when not compared
    old_holdout: OldHoldout | None = None  # None without a champion, or one not compared


class PretrainInputs(_HoldoutInputs, AgainstChampion):
    """A pretraining or retraining challenger and the champion of its name (`champion_*`)."""

    gate: Literal["pretrain"] = "pretrain"
    footing: str = ""  # why the champion cannot be compared fairly ('' when it can): then nothing is scored


class SpecialistInputs(_HoldoutInputs, AgainstBase):
    """A domain fine-tune, its base (`champion_*`: the base scored on the domain holdout, and on its own) and
    the specialist's own champion, which a new version must beat on the domain holdout too."""

    gate: Literal["specialist"] = "specialist"
    base: str  # models:/NAME/VERSION the fine-tune started from
    incumbent_version: str | None = None  # None: the specialist has no champion yet
    incumbent_bits_per_byte: float | None = None


class MergeInputs(GateInputs):
    """A merge scored beside the base and each specialist on every parent's holdout, then on the base's own,
    and beside the champion of the name it registers under on those same holdouts."""

    gate: Literal["merge"] = "merge"
    scores: list[HoldoutScore]
    max_gap: float
    auto_promote: bool
    incumbent_version: str | None = None  # None: no champion of this name yet

    def tags(self) -> dict[str, str]:
        incumbent = {} if self.incumbent_version is None else {gate_tags.INCUMBENT_VERSION: self.incumbent_version}
        return {gate_tags.MAX_GAP: str(self.max_gap)} | incumbent


class AlignmentInputs(GateInputs):
    """An aligned model beside the base it started from (same held-out data, the base's pretraining holdout)
    and beside the champion of the name it registers under (same held-out data)."""

    gate: Literal["alignment"] = "alignment"
    method: Literal["sft", "dpo"]
    aligned: AlignedScores
    base: AlignedScores
    max_regression: float
    auto_promote: bool
    incumbent_version: str | None = None  # None: no champion of this name yet
    incumbent: AlignedScores | None = None  # its scores on this held-out data (None: could not be scored)

    def tags(self) -> dict[str, str]:
        incumbent = {} if self.incumbent_version is None else {gate_tags.INCUMBENT_VERSION: self.incumbent_version}
        return {gate_tags.METHOD: self.method, gate_tags.MAX_REGRESSION: str(self.max_regression)} | incumbent

    def check_tags(self, passed: dict[str, bool]) -> dict[str, str]:
        """Each check a tag: its checks are named measures a reviewer reads one by one."""
        return {gate_tags.CHECK + name: gate_tags.flag(ok) for name, ok in passed.items()}


@dataclass(frozen=True)
class Compared:
    """What a workload's pretraining and specialist gates compare: the measure, and the typed inputs that hold it
    (`challenger_<measure>`, `champion_<measure>`, `incumbent_<measure>`), so that one gathering fills either."""

    measure: Measure
    inputs: type[AgainstChampion]  # a challenger against the champion of its name
    old_holdout: type[OldScores]  # both on the champion's (or the base's) own holdout
    specialist: type[AgainstBase]  # a fine-tune against its base and its own champion


BY_BITS_PER_BYTE = Compared(BITS_PER_BYTE, PretrainInputs, OldHoldout, SpecialistInputs)  # language models
