"""foundry.data.validation_report: the gates' report reads back equal, reads reports written before it was typed,
and names each failed expectation."""

from __future__ import annotations

import json

from foundry.data.validation_report import ExpectationResult, PiiCounts, SuiteResult, ValidationReport

UNIQUE = ExpectationResult(
    expectation="expect_column_values_to_be_unique",
    kwargs={"column": "sha256"},
    success=False,
    observed="2 unexpected rows, e.g. ['ab', 'ab']",
)
ROWS = ExpectationResult(
    expectation="expect_table_row_count_to_be_between", kwargs={"min_value": 1}, success=True, observed="observed 40"
)
PAIRS = ExpectationResult(
    expectation="expect_column_pair_values_to_be_in_set",
    kwargs={"column_A": "parent_split", "column_B": "split", "value_pairs_set": [["train", "train"]]},
    success=True,
    observed="no observation",
)

# A report as `validate_dataset` wrote it with `json.dumps` before the report was a typed value.
WRITTEN_BEFORE = {
    "success": False,
    "suites": {
        "documents": {
            "success": False,
            "results": [
                {
                    "expectation": "expect_column_values_to_be_unique",
                    "kwargs": {"column": "sha256"},
                    "success": False,
                    "observed": "2 unexpected rows, e.g. ['ab', 'ab']",
                },
                {
                    "expectation": "expect_table_row_count_to_be_between",
                    "kwargs": {"min_value": 1},
                    "success": True,
                    "observed": "observed 40",
                },
            ],
        },
        "lineage": {"success": True, "results": [PAIRS.model_dump()]},
    },
    "pii": {"found": {}, "allowed": {"email": 2}},
}


def test_a_report_passes_only_when_every_suite_did_and_names_each_failure():
    report = ValidationReport.of(
        {
            "documents": SuiteResult(success=False, results=[UNIQUE, ROWS]),
            "lineage": SuiteResult(success=True, results=[PAIRS]),
        }
    )
    assert not report.success and report.failures() == [("documents", UNIQUE)]
    assert report.failure_message("data") == (
        "data validation failed, nothing was versioned or trained:\n"
        "  documents: expect_column_values_to_be_unique(column=sha256) 2 unexpected rows, e.g. ['ab', 'ab']"
    )


def test_a_written_report_reads_back_equal_and_keeps_the_shape_reports_always_had(tmp_path):
    report = ValidationReport.of(
        {
            "documents": SuiteResult(success=False, results=[UNIQUE, ROWS]),
            "lineage": SuiteResult(success=True, results=[PAIRS]),
        },
        PiiCounts(found={}, allowed={"email": 2}),
    )
    path = report.write(tmp_path / "validation_report.json")
    assert ValidationReport.read(path) == report
    assert json.loads(path.read_text()) == WRITTEN_BEFORE


def test_a_report_written_before_it_was_typed_reads(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps(WRITTEN_BEFORE, indent=1))
    report = ValidationReport.read(tmp_path / "old.json")
    assert [(name, e.expectation) for name, e in report.failures()] == [("documents", UNIQUE.expectation)]
    assert report.pii.allowed == {"email": 2}


def test_an_alignment_report_has_no_personal_data_counts_and_writes_none(tmp_path):
    report = ValidationReport.of({"records": SuiteResult(success=True, results=[ROWS])})
    path = report.write(tmp_path / "r.json")
    assert report.success and "pii" not in json.loads(path.read_text())
