"""The one verdict every gate returns: passed or not, champion now or not, why, each named check with the
figures it compared, and the inputs it was decided on. Recorded on the run, the version (`tags`) and the card."""

from __future__ import annotations

from foundry.core import gate_tags
from foundry.core.contracts import _Value
from foundry.core.open_union import member_of
from foundry.gates.inputs import GATE_INPUTS, GateInputs

# Any gate's inputs, by their `gate` (`foundry.gates.inputs`: pretrain, specialist, merge, alignment, image,
# image_specialist, and a new workload's registered wherever it is defined).
Inputs = member_of(GateInputs, GATE_INPUTS)


class Check(_Value):
    """One named comparison: the candidate's figure beside the one it is held to, and the allowance."""

    passed: bool
    candidate: float | None = None  # None: not measured (a comparison not made passes nothing)
    reference: float | None = None  # the champion's, the base's, the specialist's...
    allowance: float = 0.0  # the margin it must win by, or how much worse it may be


class Decision(_Value):
    """A gate's verdict; `make_champion` only when every check passed and the inputs' policy promotes
    automatically (`registry.auto_promote`), else a reviewer decides."""

    passed: bool
    make_champion: bool
    verdict: str
    checks: dict[str, Check]  # in the order they were made; empty when there was nothing to compare with
    inputs: Inputs

    @classmethod
    def of(cls, inputs: Inputs, checks: dict[str, Check], verdict: str) -> Decision:
        passed = all(check.passed for check in checks.values())
        return cls(
            passed=passed,
            make_champion=passed and inputs.auto_promote,
            verdict=verdict,
            checks=checks,
            inputs=inputs,
        )

    @property
    def gate(self) -> str:
        return self.inputs.gate

    def tags(self) -> dict[str, str]:
        """The `gate.*` tags of a registered version (`foundry lineage` and the tests read them)."""
        passed = {name: check.passed for name, check in self.checks.items()}
        return {**self.run_tags(), **self.inputs.tags(), **self.inputs.check_tags(passed)}

    def run_tags(self) -> dict[str, str]:
        """The verdict and whether it passed: what the run that judged records (a version records `tags`)."""
        return gate_tags.verdict(self.verdict, self.passed)
