"""What a data gate found, as one typed value: suites, their expectations, what each observed.

Every workload's data gate (`foundry.pretrain.validate_documents`, `foundry.vision.validate_images`,
`foundry.align.validate`, run through `foundry.data.validate`) writes it as `validation_report.json` (logged under
`validation/` on the run); `read` takes back every report written since the gates began, as the JSON has kept one
shape: `{"success", "suites": {name: {"success", "results"}}, "pii"?}`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExpectationResult(_Report):
    """One Great Expectations expectation on one table, and what it saw."""

    expectation: str  # GX's type, e.g. expect_column_values_to_be_unique
    kwargs: dict[str, Any]  # as JSON has them: column names, bounds, value sets (pairs become lists)
    success: bool
    observed: str  # "observed 5", "2 unexpected rows, e.g. [...]" or "no observation"

    def describe(self) -> str:
        """`expectation(k=v, ...) observed`: what the failure message shows for it."""
        arguments = ", ".join(f"{k}={v}" for k, v in self.kwargs.items())
        return f"{self.expectation}({arguments}) {self.observed}"


class SuiteResult(_Report):
    """One table's suite: passed when every expectation did."""

    success: bool
    results: list[ExpectationResult]


class PiiCounts(_Report):
    """Documents holding each kind of personal data or secret the detectors found (kinds only, never the data):
    `found` fails the gate, `allowed` (by `data.pii_allowed`) went through."""

    found: dict[str, int]
    allowed: dict[str, int]


class ValidationReport(_Report):
    """Every suite a gate ran, by table name; `pii` for document data (the alignment gate has none)."""

    success: bool
    suites: dict[str, SuiteResult]
    pii: PiiCounts | None = None

    @classmethod
    def of(cls, suites: dict[str, SuiteResult], pii: PiiCounts | None = None) -> ValidationReport:
        """Passed when every suite did."""
        return cls(success=all(s.success for s in suites.values()), suites=suites, pii=pii)

    def failures(self) -> list[tuple[str, ExpectationResult]]:
        """(suite, expectation) for each expectation that failed, in the order they ran."""
        return [(name, e) for name, suite in self.suites.items() for e in suite.results if not e.success]

    def failure_message(self, what: str) -> str:
        """`<what> validation failed, nothing was versioned or trained:` then one line per failed expectation."""
        lines = [f"{name}: {e.describe()}" for name, e in self.failures()]
        return f"{what} validation failed, nothing was versioned or trained:\n  " + "\n  ".join(lines)

    def write(self, path: Path) -> Path:
        path.write_text(self.model_dump_json(indent=1, exclude_none=True))
        return path

    @classmethod
    def read(cls, path: Path) -> ValidationReport:
        return cls.model_validate_json(Path(path).read_text())
