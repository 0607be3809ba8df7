"""No modality branch outside the workload folders (#54): the trainer, the stages, the gates, purge, fine-tuning and
the reports ask a `Workload` (`foundry.core.workload`) or a typed value what differs between text, chat and images.
A scan of the code's syntax trees finds a comparison of a modality with a literal (`modality == "image"`,
`config.data.modality != "text"`, `saved.get("modality") == ...`), a `.is_documents` or `.is_images` question and
an `isinstance` of a metrics type (`HoldoutMetrics`, `VisionMetrics`, `AlignmentMetrics`) anywhere but in the
workloads' own folders."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from conftest import REPO_ROOT

SCANNED = ("foundry", "tasks", "flows", "models")
WORKLOAD_FOLDERS = ("foundry/vision", "foundry/align", "foundry/pretrain")
QUESTIONS = {"is_documents", "is_images"}
METRICS = {"HoldoutMetrics", "VisionMetrics", "AlignmentMetrics"}


def _names_modality(node: ast.AST) -> bool:
    """`modality`, `x.modality`, `x["modality"]`, `x.get("modality")`."""
    if isinstance(node, ast.Name):
        return node.id == "modality"
    if isinstance(node, ast.Attribute):
        return node.attr == "modality"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "modality"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "modality"
    return False


def _literal(node: ast.AST) -> bool:
    """A string, or a tuple, list or set of strings: what a branch on one modality compares with."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and bool(node.elts) and all(map(_literal, node.elts))


def _type_name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def branches(source: str) -> list[tuple[int, str]]:
    """(line, what) for each modality branch in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_names_modality, sides)) and any(map(_literal, sides)):
                found.append((node.lineno, "a modality compared with a literal"))
        elif isinstance(node, ast.Attribute) and node.attr in QUESTIONS:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Call) and _type_name(node.func) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if named := {_type_name(k) for k in kinds} & METRICS:
                found.append((node.lineno, f"isinstance(..., {', '.join(sorted(named))})"))
    return sorted(found)


def test_the_scan_finds_each_kind_of_branch():
    source = textwrap.dedent("""
        if config.data.modality == "image": pass
        if "text" != modality: pass
        if saved.get("modality") in ("image", "video"): pass
        if values["modality"] not in ["text"]: pass
        if manifest.is_documents: pass
        ok = not manifest.is_images
        if isinstance(m, HoldoutMetrics): pass
        if isinstance(m, (int, metrics.VisionMetrics)): pass
        # not branches: a table's value, a modality passed on, another attribute
        if holds != self.modality: pass
        workload.named(config.data.modality)
        if hit.holds == "image": pass
        if isinstance(m, dict): pass
    """)
    assert [line for line, _ in branches(source)] == [2, 3, 4, 5, 6, 7, 8, 9]


def test_no_modality_branch_outside_the_workload_folders():
    found = []
    for package in SCANNED:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if relative.startswith(tuple(f"{folder}/" for folder in WORKLOAD_FOLDERS)):
                continue
            found += [f"{relative}:{line}: {what}" for line, what in branches(path.read_text())]
    assert not found, "ask the workload (foundry.core.workload) or the typed value instead:\n" + "\n".join(found)


def test_the_workload_folders_exist_as_the_scan_skips_them():
    """A folder renamed would let its branches spread unseen under its new name."""
    assert all(Path(REPO_ROOT / folder / "workload.py").is_file() for folder in WORKLOAD_FOLDERS)
