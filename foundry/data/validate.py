"""Stage A, the gate: the Great Expectations suites of the workload whose data a prepared folder holds.

Each workload's `validate` holds its suites (documents: `foundry.pretrain.validate_documents`; images:
`foundry.vision.validate_images`; chat records: `foundry.align.validate`). A failure raises `ValidationFailed`
naming each failed expectation with what was observed, before anything is versioned or any compute is spent on
training.
"""

from __future__ import annotations

from foundry.core import workload
from foundry.core.preparing import Validating
from foundry.data.manifest import DatasetManifest
from foundry.data.validate_gx import ValidationFailed, run_suites
from foundry.data.validation_report import ValidationReport

__all__ = ["ValidationFailed", "run_suites", "validate_dataset"]  # the gates' machinery, where callers found it


def validate_dataset(job: Validating) -> ValidationReport:
    """Run the gate over a prepared directory; writes the report, raises `ValidationFailed` on failure.
    With `job.docs_dir`, a failure also leaves GX data docs (HTML, `index.html` first) there. With `job.parent`, the
    data version whose ledger this one was built on, the splits must be the ones its ledger gives. The suites are
    those of the workload whose data the folder holds (`validate_documents` for documents)."""
    return workload.for_manifest(DatasetManifest.read(job.data_dir)).validate(job)
