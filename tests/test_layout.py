"""The package's layout: no import cycle, evaluation never imports training, the report stays
light, and the non-finite policy is the same for training and black-box fitting."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.helpers import REPO
from vgp_bench.failures import NonFiniteTrainingError
from vgp_bench.nonfinite import NonFinitePolicy, SkippedSteps

PACKAGE = REPO / "vgp_bench"


def module_name(path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """vgp_bench module -> the vgp_bench modules it imports (anywhere in it, TYPE_CHECKING too)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            graph[name] |= {target for target in targets if target in modules} - {name}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for target in graph[stack.pop()]:
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_no_module_imports_itself_through_others() -> None:
    graph = import_graph()
    cycles = sorted(name for name in graph if name in reachable(graph, name))
    assert cycles == []


def test_evaluation_and_the_report_never_import_training() -> None:
    graph = import_graph()
    assert "vgp_bench.train" not in reachable(graph, "vgp_bench.evaluate")
    assert "vgp_bench.train" not in reachable(graph, "vgp_bench.report")


def test_the_report_imports_neither_torch_nor_hydra() -> None:
    code = "import sys, vgp_bench.report; print(sorted({'torch', 'hydra'} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert result.stdout.strip() == "[]"


def test_the_non_finite_policy_counts_and_stops_at_its_limit() -> None:
    policy, count = NonFinitePolicy(limit=2), SkippedSteps()
    assert not policy.after_step(count, finite=False)
    assert not policy.after_step(count, finite=True) and count.nonfinite_in_row == 0
    assert not policy.after_step(count, finite=False)
    assert policy.after_step(count, finite=False) and count.nonfinite_total == 3
    error = policy.error(5, "; lower the step size")
    assert isinstance(error, NonFiniteTrainingError)
    assert str(error) == (
        "the bound or its gradient was NaN/Inf for 2 steps in a row (step 5); lower the step size"
    )
    never = NonFinitePolicy(limit=None)
    assert not any(never.after_step(SkippedSteps(), finite=False) for _ in range(100))


@pytest.mark.parametrize("family", ["vgp", "mean_field", "planar_flow", "hvi"])
def test_every_inference_config_is_a_black_box_family(family: str) -> None:
    from vgp_bench.blackbox import families

    assert family in families()
    assert {path.stem for path in (REPO / "configs" / "inference").glob("*.yaml")} <= set(
        families()
    )
