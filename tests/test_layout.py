"""The package's layout: no import cycle, evaluation never imports training, the runner imports
nothing above it and its rooms import only downwards, the report stays light, the non-finite
policy is the same for training and black-box fitting, and every document the project refers to
is in the repository."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, project_files
from vgp_bench.errors import NonFiniteTrainingError
from vgp_bench.locations import group_options
from vgp_bench.run.loop.nonfinite import NonFinitePolicy, SkippedSteps

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
    assert "vgp_bench.run.commands.train" not in reachable(graph, "vgp_bench.run.loop.evaluate")
    assert "vgp_bench.run.commands.train" not in reachable(graph, "vgp_bench.analysis.report")


ABOVE_THE_RUNNER = ("analysis", "studies", "benchmarks", "blackbox")


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_runner_imports_nothing_from_above_it() -> None:
    """run/ trains with what lies below it (models, heads, data, diagnostics, figures); the
    analysis, the studies, the benchmarks and black-box fitting use it, never the reverse."""
    graph = import_graph()
    upward = {
        (name, target)
        for name in graph
        if within(name, "vgp_bench.run")
        for target in graph[name]
        if any(within(target, f"vgp_bench.{room}") for room in ABOVE_THE_RUNNER)
    }
    assert upward == set()


# run/'s rooms from the ground up; a module of run/ outside them is one of the config's
RUNNER_ROOMS = ("process", "loggers", "config", "folder", "loop", "commands")


def runner_room(module: str) -> str:
    part = module.split(".")[2]
    return part if part in RUNNER_ROOMS else "config"


def test_the_runners_rooms_import_only_the_rooms_below_them() -> None:
    """process <- loggers <- config <- folder <- loop <- commands: a room imports only from
    itself and the rooms below it. The one exception: the checks before Hydra makes a folder
    (`prestart`, a config module) read the folder (a run inside a run, trainer.init_model)."""
    graph = import_graph()
    upward = sorted(
        (name, target)
        for name in graph
        if within(name, "vgp_bench.run") and name != "vgp_bench.run"
        for target in graph[name]
        if within(target, "vgp_bench.run")
        and RUNNER_ROOMS.index(runner_room(target)) > RUNNER_ROOMS.index(runner_room(name))
        and not (name.endswith(".prestart") and runner_room(target) == "folder")
    )
    assert upward == []


def test_the_report_imports_neither_torch_nor_hydra() -> None:
    code = (
        "import sys, vgp_bench.analysis.report; "
        "print(sorted({'torch', 'hydra'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert result.stdout.strip() == "[]"


def test_the_studies_read_runs_through_the_report_and_never_train() -> None:
    """vgp_bench.studies reads run records through analysis/report and analysis/paired; its one
    room of run/ is the progress table's replay of the trainer's early stopping (as the script
    before it did); it reaches no training, and its READMEs, paired differences and cost tables
    import neither torch nor hydra (measuring the costs imports benchmarks/ when it runs)."""
    graph = import_graph()
    studies = [name for name in graph if name.startswith("vgp_bench.studies")]
    into_run = {
        (name, target)
        for name in studies
        for target in graph[name]
        if target.startswith("vgp_bench.run.") or target == "vgp_bench.run"
    }
    assert into_run == {
        ("vgp_bench.studies.progress", "vgp_bench.run.folder.checkpoint"),
        ("vgp_bench.studies.progress", "vgp_bench.run.loop.early_stopping"),
    }
    assert "vgp_bench.run.commands.train" not in reachable(graph, "vgp_bench.studies.readme")
    light = ["readme", "reproduction", "paired_differences", "paired_evaluations"]
    code = (
        "import sys; "
        + "; ".join(f"import vgp_bench.studies.{name}" for name in light)
        + "; print(sorted({'torch', 'hydra'} & set(sys.modules)))"
    )
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


@pytest.mark.parametrize("family", [*group_options("inference"), "mean_field"])  # mean_field: vae
def test_every_inference_config_is_a_black_box_family(family: str) -> None:
    from vgp_bench.blackbox import families

    assert family in families()
    assert {path.stem for path in (REPO / "configs" / "inference").glob("*.yaml")} <= set(
        families()
    )


def test_no_project_file_refers_to_a_design_note_outside_the_repository() -> None:
    outside = ("DESIGN" + ".md").encode()  # spelt in two parts so that this file passes
    assert [name for name in project_files() if outside in (REPO / name).read_bytes()] == []


DOCS_REFERENCE = re.compile(r"docs/([\w-]+\.md)(?:, sections? ([\d.]+)(?: and ([\d.]+))?)?")
HEADING_NUMBER = re.compile(r"^#+ (\d+(?:\.\d+)*)\.? ", re.MULTILINE)


def test_every_docs_page_and_section_the_project_names_exists() -> None:
    named: dict[tuple[str, str], list[str]] = {}
    for name in project_files():
        text = (REPO / name).read_bytes().decode("utf-8", errors="ignore")
        for page, *sections in DOCS_REFERENCE.findall(text):
            for section in [section for section in sections if section] or [""]:
                named.setdefault((page, section.rstrip(".")), []).append(name)
    assert ("design.md", "2") in named  # the pattern finds the code's references
    missing = []
    for (page, section), names in sorted(named.items()):
        path = REPO / "docs" / page
        numbers = set(HEADING_NUMBER.findall(path.read_text())) if path.is_file() else set()
        if not path.is_file() or (section and section not in numbers):
            missing.append(
                f"docs/{page}" + (f", section {section}" if section else "") + f" {names}"
            )
    assert missing == []


def test_scripts_are_thin_and_no_module_is_large() -> None:
    """A script is an entry point (at most 300 lines; its logic lives in the package) and no
    Python file outside tests/ is over 450 lines: add a small module rather than grow one."""
    limits = {"scripts": 300}
    too_long = {}
    for name in project_files():
        if not name.endswith(".py") or name.startswith("tests/"):
            continue
        lines = len((REPO / name).read_text().splitlines())
        if lines > limits.get(name.split("/")[0], 450):
            too_long[name] = lines
    assert too_long == {}


def test_hydra_plugins_read_nothing_of_the_runner() -> None:
    """run/commands/train registers the plugins of hydra_plugins/, so they sit below the runner:
    they hand Hydra vgp_bench/sweeps/ and import nothing of vgp_bench/run/."""
    plugins = PACKAGE.parent / "hydra_plugins"
    for path in plugins.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not within(node.module, "vgp_bench.run"), f"{path} imports {node.module}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not within(alias.name, "vgp_bench.run"), f"{path} imports {alias.name}"
