"""The shape of the code: imports have no side effects, no import cycles, layers that point one way,
dependencies declared, the served model a leaf, every module saying what it holds and none a dumping ground.
(`make test` runs ruff's linter and formatter check.)"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from conftest import REPO_ROOT as REPO

PACKAGES = ("foundry", "flows", "tasks", "models")
# Flow modules are entry points: a Prefect worker imports them directly, so they set up the environment.
ENTRY_MODULES = {
    "flows.align",
    "flows.train_pipeline",
    "flows.retrain",
    "flows.reproduce",
    "flows.search",
    "flows.merge",
    "flows.finetune",
    "flows.evaluate",
    "flows.gc",
    "flows.purge",
}


def module_files() -> dict[str, Path]:
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in the file names, at any depth (lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def module_level_imports(path: Path) -> set[str]:
    """The modules an import statement outside any function names: what importing the file runs."""
    names, tree = set(), ast.parse(path.read_text())
    nodes = list(ast.iter_child_nodes(tree))
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        nodes.extend(ast.iter_child_nodes(node))
    return names


def test_importing_any_library_module_changes_no_variable_and_creates_no_folder(tmp_path):
    """Every module but the flow entry points, imported in a fresh process in an empty folder, after the
    third-party modules they import when imported (Lightning sets variables of its own when imported: not ours to
    judge; a library only a function imports is not imported, and its effects, should importing a module reach
    it, count against that module). Each change is named with the first module whose import made it."""
    modules = sorted(set(module_files()) - ENTRY_MODULES)
    at_import = set().union(*(module_level_imports(path) for path in module_files().values()))
    libraries = sorted(_third_party_modules() & at_import)
    program = f"""
import importlib, json, os, sys
sys.path.insert(0, {str(REPO)!r})
for name in {libraries!r}:
    try:
        importlib.import_module(name)
    except ImportError:  # `from a import b` where b is a name, not a module
        pass
seen, environ, entries = {{}}, dict(os.environ), set(os.listdir("."))
for name in {modules!r}:
    importlib.import_module(name)
    changed = sorted(k for k in set(os.environ) | set(environ) if os.environ.get(k) != environ.get(k))
    created = sorted(set(os.listdir(".")) - entries)
    if changed or created:
        seen[name] = {{"changed": changed, "entries": created}}
    environ, entries = dict(os.environ), set(os.listdir("."))
print(json.dumps(seen))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOUNDRY_", "PREFECT_", "MLFLOW_", "DVC_"))}
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {}, seen  # {module: {"changed": [variables], "entries": [what it created here]}}
    assert os.listdir(tmp_path) == []


def test_a_flow_module_sets_up_the_environment_when_imported(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("FOUNDRY_", "PREFECT_", "MLFLOW_", "TORCHINDUCTOR_"))
    }
    env["FOUNDRY_HOME"] = str(tmp_path / "home")
    # torch.compile's kernels (train.compile) go under the home too, where torch itself looks for them.
    program = (
        "import os, flows.train_pipeline; from torch._inductor.runtime.cache_dir_utils import cache_dir; "
        "print(os.environ['PREFECT_HOME'], os.environ['DO_NOT_TRACK'], cache_dir())"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    home = tmp_path / "home"
    assert result.stdout.split()[-3:] == [str(home / "prefect"), "true", str(home / "cache" / "torchinductor")]


def test_no_import_cycle_between_project_modules_lazy_imports_included():
    files = module_files()
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_modules(path):
            # `from a.b import c` names module a.b, or module a.b.c when c is one.
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    cycles = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        if node in stack:
            cycles.append(stack[stack.index(node) :] + [node])
            return
        if node in done:
            return
        for target in sorted(graph[node]):
            # A package's __init__ importing nothing, its submodules importing the package: not a cycle.
            if not node.startswith(f"{target}."):
                visit(target, [*stack, node], done)
        done.add(node)

    done: set[str] = set()
    for node in sorted(graph):
        visit(node, [], done)
    assert not cycles, cycles


def test_layers_point_one_way():
    """models/ is pure ML; the library (foundry/) never imports Prefect tasks or flows; tasks never import flows."""
    forbidden = {
        "models": ("foundry", "flows", "tasks", "prefect", "mlflow", "dvc", "great_expectations"),
        "foundry": ("flows", "tasks", "prefect"),
        "tasks": ("flows",),
    }
    allowed = {  # the CLI and the deployments table are entry points that start flows
        "foundry.cli.pipeline": ("flows",),
        "foundry.cli.ops": ("flows",),
        "foundry.cli.data": ("tasks",),  # `foundry prepare` runs the partitioned prepare as the pipeline does
        "foundry.cli.registry": ("tasks",),  # `foundry promote` holds the promotion lock a flow holds
        "foundry.cli.align": ("flows",),
        "foundry.cli.search": ("flows",),
        "foundry.cli.specialists": ("flows",),
        "foundry.cli.evaluate": ("flows",),  # `foundry evaluate` runs the evaluate flow
        "foundry.cli.purge": ("flows",),  # `foundry purge --retrain` runs the pipeline on the purged data
        "foundry.ops.doctor": ("prefect",),  # `foundry doctor` asks Prefect itself whether it sends telemetry
        "foundry.cli.console": ("prefect",),  # the CLI's console: Prefect's logging set up before ours goes on top
        "foundry.purge.prefect_runs": ("prefect",),  # `foundry purge` reads and rewrites the run pages' artifacts
        "foundry.purge.prefect_traces": ("prefect",),  # and the flow runs' parameters, states, logs and events
    }
    wrong = []
    for name, path in module_files().items():
        layer = name.split(".")[0]
        bad = tuple(b for b in forbidden.get(layer, ()) if b not in allowed.get(name, ()))
        for imported in imported_modules(path):
            if imported.split(".")[0] in bad:
                wrong.append(f"{name} imports {imported}")
    assert not wrong, wrong


def test_flows_import_task_names_without_aliases():
    """Each name a flow uses is defined once: no `import x as y` to tell two apart."""
    aliased = []
    for path in sorted((REPO / "flows").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                aliased += [f"{path.name}: {a.name} as {a.asname}" for a in node.names if a.asname]
    assert not aliased, aliased


def test_the_served_model_imports_only_models_and_its_runtime():
    leaf = REPO / "foundry" / "serving" / "pyfunc_model.py"
    roots = {name.split(".")[0] for name in imported_modules(leaf)}
    assert roots <= {"models", "mlflow", "pandas", "tokenizers", "__future__"}, roots
    model_code = set()
    for path in (REPO / "models").glob("*.py"):
        model_code |= {name.split(".")[0] for name in imported_modules(path)}
    assert "foundry" not in model_code and "tasks" not in model_code


def _third_party_modules(folders: tuple[str, ...] = PACKAGES) -> set[str]:
    names = set()
    for folder in folders:
        for path in (REPO / folder).rglob("*.py"):
            names |= imported_modules(path)
    local = {p.stem for folder in folders for p in (REPO / folder).rglob("*.py")}  # tests' own helper modules
    return {n for n in names if n.split(".")[0] not in (*sys.stdlib_module_names, *PACKAGES, *local, "__future__")}


def _declared(extras: tuple[str, ...] = ()) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [d for extra in extras for d in project["optional-dependencies"][extra]]
    return {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}


@pytest.mark.parametrize(("folders", "extras"), [(PACKAGES, ()), (("tests", "bench"), ("dev", "llama"))])
def test_every_third_party_module_imported_is_declared(folders, extras):
    """The code's imports in `dependencies`; the tests' and benchmarks' in those or the `dev` extra."""
    providers = metadata.packages_distributions()
    declared = _declared(extras)
    undeclared = {}
    for module in sorted({name.split(".")[0] for name in _third_party_modules(folders)}):
        distributions = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        assert distributions, f"{module} is imported but no installed distribution provides it"
        if not distributions & declared:
            undeclared[module] = sorted(distributions)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_served_models_requirements_pin_what_the_project_pins():
    """One version of torch, mlflow and tokenizers: the served model asks for what training used."""
    from packaging.requirements import Requirement

    project = {
        Requirement(d).name: Requirement(d).specifier
        for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    served = [Requirement(line) for line in (REPO / "foundry/serving/requirements.txt").read_text().split()]
    for requirement in served:
        if requirement.name in project and project[requirement.name]:
            assert requirement.specifier == project[requirement.name], requirement.name


# A module holds one thing, said in its docstring's first line; files are split by meaning, not by length (the
# review rule: CONTRIBUTING.md). The bound below only catches a dumping ground, far above any module today.
DUMPING_GROUND = 800
PLACEHOLDERS = {"todo", "tbd", "fixme", "xxx", "module", "helpers", "utils", "misc", "stuff"}


def what_it_holds(path: Path) -> str:
    """The first line of a module's docstring ('' when it has none)."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return docstring.strip().split("\n")[0].strip()


def says_what_it_holds(first_line: str) -> bool:
    """At least three words, and not a placeholder ("TODO", "Helpers.", "Utils")."""
    words = re.findall(r"[\w'-]+", first_line.lower())
    return len(words) >= 3 and not set(words) <= PLACEHOLDERS


def test_every_module_says_what_it_holds():
    """Each module's docstring opens with a line saying what it holds, so a review can hold the file to it."""
    unsaid = {name: what_it_holds(path) for name, path in module_files().items()}
    unsaid = {name: line for name, line in unsaid.items() if not says_what_it_holds(line)}
    assert not unsaid, f"modules whose docstring does not say what they hold: {unsaid}"


@pytest.mark.parametrize("line", ["", "TODO", '"""TODO"""', "Helpers.", "misc utils", "Stuff"])
def test_a_placeholder_docstring_does_not_say_what_a_module_holds(line):
    assert not says_what_it_holds(line.strip('"'))


def test_no_module_is_a_dumping_ground():
    long = {
        name: n for name, path in module_files().items() if (n := len(path.read_text().splitlines())) > DUMPING_GROUND
    }
    assert not long, f"modules past {DUMPING_GROUND} lines (split them by what they hold, CONTRIBUTING.md): {long}"


def test_the_fast_tests_mirror_the_tree():
    """tests/fast/ has one folder per package of `foundry` and per other top-level package (plus infra/), and no
    folder for anything else: a reader finds a feature's tests where its code is."""
    packages = {p.parent.name for p in (REPO / "foundry").glob("*/__init__.py")}
    expected = packages | {"flows", "tasks", "models", "infra"}
    folders = {p.name for p in (REPO / "tests" / "fast").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == expected, f"without tests: {sorted(expected - folders)}; of nothing: {sorted(folders - expected)}"
