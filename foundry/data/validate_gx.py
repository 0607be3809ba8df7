"""The data gates' machinery: Great Expectations suites run over pandas tables (GX Core 1.x, an ephemeral context),
each expectation's outcome kept in a `ValidationReport`, GX data docs on failure, and the sticky-split suite over
a dataset's ledger that text and image datasets share. The gates themselves: `foundry.pretrain.validate_documents`
(text), `foundry.vision.validate_images` (images), `foundry.align.validate` (alignment records).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from foundry.core.fs import remove_tree
from foundry.data.validation_report import ExpectationResult, SuiteResult, ValidationReport

DOCS_SITE = "foundry"


class ValidationFailed(RuntimeError):
    """The prepared data broke at least one expectation."""

    def __init__(self, message: str, report: ValidationReport):
        super().__init__(message)
        self.report = report


def _observed(result: dict) -> str:
    if "observed_value" in result:
        return f"observed {result['observed_value']!r}"
    if "unexpected_count" in result:
        examples = result.get("partial_unexpected_list", [])[:3]
        return f"{result['unexpected_count']} unexpected rows, e.g. {examples}"
    return "no observation"


def _context(docs_dir: Path | None):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:  # the ephemeral context's own site lives in a throwaway folder
        context.add_data_docs_site(
            DOCS_SITE,
            {
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    return context


def _run(context, definition, table: pd.DataFrame, with_docs: bool):
    import great_expectations as gx

    if not with_docs:
        return definition.run(batch_parameters={"dataframe": table})
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name=definition.name,
            validation_definitions=[definition],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=[DOCS_SITE])],
        )
    )
    return next(iter(checkpoint.run(batch_parameters={"dataframe": table}).run_results.values()))


def run_suites(tables: dict[str, pd.DataFrame], suites: dict, docs_dir: Path | None = None) -> dict[str, SuiteResult]:
    """Validate each table against its suite: one result per expectation, by suite name.
    With `docs_dir`, the results also become GX data docs (HTML) there."""
    import great_expectations as gx

    context = _context(docs_dir)
    results = {}
    source = context.data_sources.add_pandas("foundry")
    for name, expectations in suites.items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(f"{name}_all")
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
        outcome = _run(context, definition, tables[name], docs_dir is not None)
        entries = [
            ExpectationResult(
                expectation=r.expectation_config.type,
                # As JSON has it (pairs become lists), so the report reads back equal.
                kwargs=json.loads(
                    json.dumps({k: v for k, v in r.expectation_config.kwargs.items() if k != "batch_id"}, default=str)
                ),
                success=bool(r.success),
                observed=_observed(r.result or {}),
            )
            for r in outcome.results
        ]
        results[name] = SuiteResult(success=bool(outcome.success), results=entries)
    return results


def drop_docs_assets(docs_dir: Path) -> None:
    """Fonts and images are 4 MB of every site; the pages read fine without them."""
    for folder in ("fonts", "images"):
        remove_tree(docs_dir / "static" / folder, within=docs_dir, ignore_errors=True)


def lineage_table(data_dir: Path, documents: pd.DataFrame, parent: Path | None, num_perm: int) -> pd.DataFrame:
    """One row per document the dataset, its ledger or its parent's ledger knows: the split the parent's ledger
    gave it ('new' when it did not list it), the split this version's ledger gives it ('unlisted' when it does
    not) and the split it is in now ('absent' when it is in neither split file)."""
    from foundry.data.ledger import Ledger

    ledger = Ledger.read(data_dir, num_perm).split_of
    before = Ledger.read(parent, num_perm).split_of if parent is not None else {}
    now = dict(zip(documents["sha256"], documents["split"]))
    shas = sorted(set(ledger) | set(before) | set(now))
    return pd.DataFrame(
        {
            "sha256": shas,
            "parent_split": [before.get(sha, "new") for sha in shas],
            "ledger_split": [ledger.get(sha, "unlisted") for sha in shas],
            "split": [now.get(sha, "absent") for sha in shas],
        }
    )


def lineage_suite() -> list:
    """Sticky splits: the ledger lists every document with its split, keeps every assignment of the parent's,
    and no document the parent (or any ancestor: the ledger carries theirs) trained on is in the holdout."""
    import great_expectations.expectations as gxe

    kept = [("train", "train"), ("holdout", "holdout")]
    return [
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="ledger_split",
            column_B="split",
            value_pairs_set=[*kept, ("train", "absent"), ("holdout", "absent")],
        ),
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="parent_split",
            column_B="ledger_split",
            value_pairs_set=[*kept, ("new", "train"), ("new", "holdout")],
        ),
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="parent_split",
            column_B="split",
            value_pairs_set=[*kept, ("train", "absent"), ("holdout", "absent"), ("new", "train"), ("new", "holdout")],
        ),
    ]
