"""No modality branch outside the workload folders (#54): the trainer, the stages, the gates, purge, fine-tuning and
the reports ask a `Workload` (`foundry.core.workload`) or a typed value what differs between text, chat and images.
A scan of the code's syntax trees finds a comparison of a modality with a literal (`modality == "image"`,
`config.data.modality != "text"`, `saved.get("modality") == ...`), a `.is_documents` or `.is_images` question and
an `isinstance` of a metrics type (those registered in `foundry.core.metrics.kinds.METRICS`: `HoldoutMetrics`,
`VisionMetrics`, `AlignmentMetrics`) or of a gate's inputs type (those of `foundry.gates.inputs`: each brings what it
adds to a decision) anywhere but in the workloads' own folders (the package of each module `foundry.core.
registrations.REGISTERED` names: a new workload's folder is known from its registration).
Nor does any module outside them import one of them: the rest asks the registry (`foundry.core.workload`, which names
them by module path), except the command a workload folder is the feature of, whose Prefect tasks, flow and CLI are
named as the folder (`tasks/align.py`, `flows/align.py`, `foundry/cli/align.py`)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from conftest import REPO_ROOT

from foundry.core.registrations import REGISTERED

SCANNED = ("foundry", "tasks", "flows", "models")
# Each registered workload's folder: the package of the module holding its `WORKLOAD` (`foundry.vision.workload`).
WORKLOAD_FOLDERS = tuple(sorted({r.module.rpartition(".")[0].replace(".", "/") for r in REGISTERED.values()}))
QUESTIONS = {"is_documents", "is_images"}
# What a branch on one workload compares with: a workload's name or its data's modality ("text", "chat", "image").
WORKLOAD_WORDS = set(REGISTERED) | {r.modality for r in REGISTERED.values()}
# Where a command's own layers live: a module there named as a workload folder (`tasks/align.py`) is its command's.
COMMAND_LAYERS = ("tasks", "flows", "foundry/cli")
WORKLOAD_PACKAGES = {folder.replace("/", ".") for folder in WORKLOAD_FOLDERS}


GATE_INPUT_MODULES = ("foundry/gates/inputs.py", "foundry/vision/gate_inputs.py")  # the shared ones, the image's


def _gate_inputs_types() -> set[str]:
    """The classes a gate decides on (`PretrainInputs`, `AlignmentInputs`, the image workload's `ImageInputs`...)."""
    trees = [ast.parse((REPO_ROOT / module).read_text()) for module in GATE_INPUT_MODULES]
    return {n.name for tree in trees for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Inputs")}


INPUTS = _gate_inputs_types()


def _metrics_types() -> set[str]:
    """The metrics types a `Candidate` may carry: those registered in `foundry.core.metrics.kinds.METRICS` once the
    contracts are imported (a new workload's registers itself where its folder defines it)."""
    import foundry.core.contracts  # noqa: F401  (imports the metrics types the contracts read)
    from foundry.core.metrics.kinds import METRICS as FAMILY

    # a test's own toy types (tests/fast/core/test_fourth_workload_types.py) register too, in the same process
    return {cls.__name__ for cls in FAMILY.members() if cls.__module__.startswith("foundry.")}


METRICS = _metrics_types()


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
            if named := {_type_name(k) for k in kinds} & (METRICS | INPUTS):
                found.append((node.lineno, f"isinstance(..., {', '.join(sorted(named))})"))
    return sorted(found)


def _word_constants(tree: ast.AST) -> set[str]:
    """The constants (UPPER_CASE names, in a module or a class) a module sets to a workload's name or modality:
    `READ_BY: ClassVar[str] = "image"`. A field's default (`kind: str = "text"`) is a value, not one of them."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value.value in WORKLOAD_WORDS:
                found |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()}
    return found


def _is_word(node: ast.AST, constants: set[str]) -> bool:
    """A workload's name or modality as a string, or a constant this module set to one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in WORKLOAD_WORDS
    return _type_name(node) in constants


def workload_words(source: str) -> list[tuple[int, str]]:
    """(line, what) for each comparison with a workload's name or modality in a module's source: `x == "image"`,
    `x in ("text", "chat")`, `READ_BY != modality` where READ_BY is "image". `"image" in columns` looks a key up in
    a table, and is not one."""
    tree = ast.parse(source)
    constants = _word_constants(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for left, op, right in zip([node.left, *node.comparators[:-1]], node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                hit = isinstance(right, ast.Tuple | ast.List | ast.Set) and any(
                    _is_word(e, constants) for e in right.elts
                )
            else:
                hit = _is_word(left, constants) or _is_word(right, constants)
            if hit:
                found.append((node.lineno, "compared with a workload's name or modality"))
                break
    return sorted(found)


def workload_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) for each import of a workload folder's package or module in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        hit = [m for m in modules if any(m == p or m.startswith(p + ".") for p in WORKLOAD_PACKAGES)]
        if hit:
            found.append((node.lineno, hit[0]))
    return sorted(found)


def may_import_workloads(relative: str) -> bool:
    """A workload folder's own module, the registry, or a command's layer named as a workload folder."""
    inside = relative.startswith(tuple(f"{folder}/" for folder in WORKLOAD_FOLDERS))
    path = Path(relative)
    command = path.parent.as_posix() in COMMAND_LAYERS and path.stem in {Path(f).name for f in WORKLOAD_FOLDERS}
    return inside or command or relative == "foundry/core/workload.py"


def test_the_gate_inputs_types_are_read_from_their_module():
    assert {"PretrainInputs", "ImageInputs", "AlignmentInputs", "MergeInputs", "SpecialistInputs"} <= INPUTS


def test_the_metrics_types_are_read_from_their_registration():
    assert METRICS == {"HoldoutMetrics", "VisionMetrics", "AlignmentMetrics"}


def test_the_workload_folders_are_read_from_the_registrations():
    assert set(WORKLOAD_FOLDERS) == {"foundry/vision", "foundry/align", "foundry/pretrain"}


def test_the_import_scan_finds_each_way_of_importing_a_workload_folder():
    source = textwrap.dedent("""
        import foundry.vision
        from foundry.align import split_ledger
        from foundry import pretrain
        import foundry.vision.shards as shards
        def later():
            from foundry.pretrain.training import model_args
        # not a workload folder's: the registry's module, a folder named alike, a relative import
        from foundry.core import workload
        from foundry.visions import x
        import foundry.alignment
        from .align import y
    """)
    assert [line for line, _ in workload_imports(source)] == [2, 3, 4, 5, 7]
    allowed = ["foundry/vision/prepare.py", "tasks/align.py", "flows/align.py", "foundry/cli/align.py"]
    assert all(map(may_import_workloads, [*allowed, "foundry/core/workload.py"]))
    refused = [
        "foundry/purge/ledgers.py",
        "tasks/data.py",
        "foundry/cli/data.py",
        "foundry/align.py",
        "tasks/x/align.py",
    ]
    assert not any(map(may_import_workloads, refused))


def test_no_module_outside_the_workload_folders_imports_one():
    found = []
    for package in SCANNED:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if not may_import_workloads(relative):
                found += [f"{relative}:{line}: {module}" for line, module in workload_imports(path.read_text())]
    assert not found, "ask the workload (foundry.core.workload.named) instead of importing its folder:\n" + "\n".join(
        found
    )


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
        if isinstance(self.inputs, AlignmentInputs): pass
        if isinstance(i, (inputs.ImageInputs, MergeInputs)): pass
        # not branches: a table's value, a modality passed on, another attribute
        if holds != self.modality: pass
        workload.named(config.data.modality)
        if hit.holds == "image": pass
        if isinstance(m, dict): pass
    """)
    assert [line for line, _ in branches(source)] == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


def outside_the_workload_folders(scan) -> list[str]:
    """What `scan` (source text -> (line, what) pairs) finds in every scanned module outside the workload folders."""
    found = []
    for package in SCANNED:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if relative.startswith(tuple(f"{folder}/" for folder in WORKLOAD_FOLDERS)):
                continue
            found += [f"{relative}:{line}: {what}" for line, what in scan(path.read_text())]
    return found


def test_no_modality_branch_outside_the_workload_folders():
    found = outside_the_workload_folders(branches)
    assert not found, "ask the workload (foundry.core.workload) or the typed value instead:\n" + "\n".join(found)


def test_the_scan_finds_each_comparison_with_a_workloads_name_or_modality():
    source = textwrap.dedent("""
        class Section:
            READ_BY: ClassVar[str] = "image"
            def misfit(self, modality):
                return self.READ_BY != modality
        TEXT = "text"
        if hit.holds == "image": pass
        if "chat" != kind: pass
        if name in ("text", "video"): pass
        if x is TEXT: pass
        if a < b == "image": pass
        # not comparisons with one: a key looked up, another word, a field's default, a lower-case name
        if "image" in model_input.columns: pass
        if holds == "plot": pass
        class Hit:
            kind: str = "text"
        if x == kind: pass
        default = "image"
        if y == default: pass
    """)
    assert [line for line, _ in workload_words(source)] == [5, 7, 8, 9, 10, 11]


def test_no_comparison_with_a_workloads_name_outside_the_workload_folders():
    found = outside_the_workload_folders(workload_words)
    assert not found, "ask the workload (foundry.core.workload) or the registrations instead:\n" + "\n".join(found)


def test_the_workload_folders_exist_as_the_scan_skips_them():
    """A folder renamed would let its branches spread unseen under its new name."""
    assert all(Path(REPO_ROOT / folder / "workload.py").is_file() for folder in WORKLOAD_FOLDERS)
