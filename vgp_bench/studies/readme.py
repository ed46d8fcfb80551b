"""Regenerate the numbers of the results READMEs from the committed runs (no hand copies).

A README holds generated tables between `<!-- table:NAME -->` and `<!-- /table -->` and
generated numbers in its prose as `<!-- v:NAME -->1.80<!-- /v -->`. Each results/<study>/README.md
with such places is a study, declared by the module vgp_bench/studies/<study>.py as its `STUDY`,
whose generators read `results/<study>/runs/*/metrics.json` (and the few other result files a
study quotes): a new study is one declaration and one README.

    .venv/bin/python -m vgp_bench.studies          # rewrite the READMEs
    .venv/bin/python -m vgp_bench.studies --check  # exit 1 if one is out of date
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from vgp_bench.studies import runs
from vgp_bench.studies.study import Study

MARKER = re.compile(r"<!-- (?:table|v):[\w.-]+ -->")
TABLE = re.compile(r"(<!-- table:([\w.-]+) -->\n)(.*?)(<!-- /table -->)", re.S)
VALUE = re.compile(r"(<!-- v:([\w.-]+) -->)(.*?)(<!-- /v -->)", re.S)


def study_of(readme: Path) -> Study:
    """The study a README with generated places belongs to: vgp_bench.studies.<folder>.STUDY."""
    name = readme.parent.name
    try:
        study = importlib.import_module(f"vgp_bench.studies.{name}").STUDY
    except (ModuleNotFoundError, AttributeError) as error:
        raise SystemExit(
            f"{readme}: generated places, but no vgp_bench/studies/{name}.py declaring STUDY "
            f"({error}); declare the study there or remove the markers"
        ) from error
    if not isinstance(study, Study) or study.name != name:
        raise SystemExit(f"vgp_bench/studies/{name}.py: STUDY is not Study({name!r}, ...)")
    return study


def declared_studies() -> list[Study]:
    """Every study: each results/<study>/README.md with generated places, by folder name."""
    readmes = sorted(runs.RESULTS.glob("*/README.md"))
    return [study_of(path) for path in readmes if MARKER.search(path.read_text())]


def generated_documents() -> list[Study]:
    """Every README with generated places: the studies', and the top-level README's paper
    rows and costs."""
    from vgp_bench.studies.paper_rows import TOP_README  # it imports this package's studies

    return [*declared_studies(), TOP_README]


def readme_path(study: Study) -> Path:
    """A study's README."""
    if study.readme:
        return runs.ROOT / study.readme
    return runs.RESULTS / study.name / "README.md"


def render(text: str, study: Study) -> str:
    """A README's text with every generated table and value rewritten from the study's runs."""
    text = TABLE.sub(lambda m: m[1] + "\n" + study.tables[m[2]]() + "\n" + m[4], text)
    return VALUE.sub(lambda m: m[1] + study.values[m[2]]() + m[4], text)


def stale_readmes(write: bool) -> list[Path]:
    """The READMEs out of date with their runs, each rewritten when `write`."""
    stale = []
    for study in generated_documents():
        path = readme_path(study)
        text = path.read_text()
        new = render(text, study)
        if new != text:
            stale.append(path)
            if write:
                path.write_text(new)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or with --check, compare) the results READMEs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a README is out of date")
    args = parser.parse_args(argv)
    stale = stale_readmes(write=not args.check)
    if args.check and stale:
        names = ", ".join(str(path.relative_to(runs.ROOT)) for path in stale)
        print(f"out of date (run scripts/results_readme.py): {names}", file=sys.stderr)
        return 1
    return 0
