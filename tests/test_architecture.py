"""The house rules that the code itself can check: one-way data flow between stages (DESIGN.md),
no import cycles, small modules and small functions in the model code."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "dse"

# Stages of the data flow, earliest first. Shared registries (errors, columns, schema, catalog)
# may be imported by every stage; a module may import its own stage and earlier ones only.
SHARED = ("dse.errors", "dse.columns", "dse.schema", "dse.catalog", "dse.plotstyle")
STAGES = (
    ("dse.resolve",),
    ("dse.hardware",),
    ("dse.perf", "dse.workload"),
    ("dse.economics",),
    ("dse.evaluate", "dse.optable"),
    ("dse.space", "dse.store", "dse.pareto", "dse.sweep", "dse.study", "dse.query", "dse.serve"),
    ("dse.validate", "dse.reports", "dse.bench", "dse.listing", "dse.calibrate"),
    ("dse.cli",),
)
# `import dse` is the public API: lazy names that resolve to modules up to the sweep/study stage.
API_RANK = next(i for i, stage in enumerate(STAGES) if "dse.study" in stage)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _rank(module: str):
    if module == "dse":
        return API_RANK
    if any(module == s or module.startswith(s + ".") for s in SHARED):
        return -1
    best = None
    for i, stage in enumerate(STAGES):
        for prefix in stage:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    return None if best is None else best[0]


def _imports(path: Path) -> set[str]:
    """dse modules imported anywhere in the file (module level and inside functions)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dse")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dse") and node.level == 0:
            if node.module != "dse":  # `from dse import catalog` imports dse.catalog, not the API
                found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names
                      if (ROOT.parent / (node.module + "." + a.name).replace(".", "/")).with_suffix(".py").exists()
                      or (ROOT.parent / (node.module + "." + a.name).replace(".", "/")).is_dir()}
    return found


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_later_stage(path):
    me = _module_name(path)
    mine = _rank(me)
    assert mine is not None, f"{me}: not placed in a stage; add it to STAGES or SHARED"
    for imported in _imports(path):
        theirs = _rank(imported)
        if theirs is None or me == "dse":
            continue
        assert theirs <= max(mine, -1) or (mine == -1 and theirs == -1), \
            f"{me} (stage {mine}) imports {imported} (stage {theirs}), a later stage"


def _is_module(name: str) -> bool:
    path = ROOT.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_no_import_cycles_at_module_level():
    graph = {}
    for path in FILES:
        tree = ast.parse(path.read_text())
        deps = set()
        for node in tree.body:  # module level only: imports inside functions are lazy by design
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dse") and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names}
                sub_modules = {m for m in subs if _is_module(m)}
                deps |= sub_modules if sub_modules == subs else {node.module} | sub_modules
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("dse")}
        graph[_module_name(path)] = {d for d in deps if d != _module_name(path)}
    state = {}

    def visit(node, stack):
        state[node] = 1
        for d in graph.get(node, ()):
            if d not in graph:
                continue
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack + [node, d]))
            if d not in state:
                visit(d, stack + [node])
        state[node] = 2
    for node in graph:
        if node not in state:
            visit(node, [])


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path):
    lines = len(path.read_text().splitlines())
    assert lines <= 420, f"{path.relative_to(ROOT)}: {lines} lines (keep modules under about 400)"


MODEL_CODE = sorted((ROOT / "perf").rglob("*.py")) + sorted((ROOT / "hardware").rglob("*.py"))


@pytest.mark.parametrize("path", MODEL_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_model_functions_stay_small(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            assert length <= 80, f"{path.relative_to(ROOT)}:{node.lineno} {node.name} is {length} lines"
