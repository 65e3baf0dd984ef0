"""Imports inside the planner go one way, down the pipeline (README, "How the planner is laid
out"): pipeline/queries -> remat, order, layout, plan -> memory -> ir -> schemas. A new import that
goes back up fails here, naming the module and what it imported. remat may use order (it runs the
eviction simulation in an order's deferred form too), never the other way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import planner

PLANNER = Path(planner.__file__).parent
SCHEMAS = PLANNER.parent / "schemas"

# What each stage may import from the planner, besides itself and the leaves every stage may use
# (LEAVES: the errors, and where the machine's caches live).
MAY_IMPORT = {
    "ir": set(),
    "profile": {"ir"},
    "memory": {"ir", "profile"},
    "order": {"ir", "memory"},
    "layout": set(),
    "remat": {"ir", "memory", "order", "profile", "time_budget"},
    "plan": {"ir", "memory", "layout", "profile"},
    "report": {"ir", "plan"},
    "export": set(),
}
LEAVES = {"errors", "cache_dir"}
# The validator and the plan's live bytes judge what the solvers produce: they never use the
# solvers' memory model.
INDEPENDENT = {"plan/validate.py", "plan/live.py"}


def _planner_imports(path: Path) -> set[str]:
    """The planner sub-packages or modules `path` imports (`planner.x.y` -> `x`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found |= {name.split(".")[1] for name in names
                  if name.startswith("planner.") and name.count(".") >= 1}
    return found


@pytest.mark.parametrize("stage", sorted(MAY_IMPORT))
def test_a_stage_imports_only_the_stages_below_it(stage):
    allowed = MAY_IMPORT[stage] | {stage} | LEAVES
    for path in sorted((PLANNER / stage).rglob("*.py")):
        wrong = _planner_imports(path) - allowed
        assert not wrong, f"{path.relative_to(PLANNER)} imports planner.{', planner.'.join(wrong)}"


def test_the_validator_does_not_use_the_solvers_memory_model():
    for name in sorted(INDEPENDENT):
        assert "memory" not in _planner_imports(PLANNER / name), name


def test_only_the_top_of_the_pipeline_imports_it():
    for path in sorted(PLANNER.rglob("*.py")):
        top = path.relative_to(PLANNER).parts[0] in ("pipeline", "queries.py")
        if not top:
            assert not _planner_imports(path) & {"pipeline", "queries"}, path


def test_schemas_import_nothing_of_ours():
    for path in sorted(SCHEMAS.glob("*.py")):
        tree = ast.parse(path.read_text())
        modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        ours = [m for m in modules
                if m.split(".")[0] in ("planner", "runtime", "service", "arenaplan")]
        assert not ours, f"{path.name} imports {ours}"
