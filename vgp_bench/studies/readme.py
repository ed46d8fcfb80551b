"""Regenerate the numbers of the results READMEs from the committed runs (no hand copies).

A README holds generated tables between `<!-- table:NAME -->` and `<!-- /table -->` and
generated numbers in its prose as `<!-- v:NAME -->1.80<!-- /v -->`; each study's declaration
names its generators, which read `results/<study>/runs/*/metrics.json` (and the few other
result files a study quotes).

    .venv/bin/python -m vgp_bench.studies          # rewrite the READMEs
    .venv/bin/python -m vgp_bench.studies --check  # exit 1 if one is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from vgp_bench.studies import calibration, convergence, dlgm1_families, draw, runs, vgp_vs_vae
from vgp_bench.studies.study import Study

STUDIES: tuple[Study, ...] = (
    vgp_vs_vae.STUDY,
    dlgm1_families.STUDY,
    convergence.STUDY,
    calibration.STUDY,
    draw.STUDY,
)
TABLE = re.compile(r"(<!-- table:([\w.-]+) -->\n)(.*?)(<!-- /table -->)", re.S)
VALUE = re.compile(r"(<!-- v:([\w.-]+) -->)(.*?)(<!-- /v -->)", re.S)


def readme_path(study: Study) -> Path:
    """A study's README."""
    return runs.RESULTS / study.name / "README.md"


def render(text: str, study: Study) -> str:
    """A README's text with every generated table and value rewritten from the study's runs."""
    text = TABLE.sub(lambda m: m[1] + "\n" + study.tables[m[2]]() + "\n" + m[4], text)
    return VALUE.sub(lambda m: m[1] + study.values[m[2]]() + m[4], text)


def stale_readmes(write: bool) -> list[Path]:
    """The READMEs out of date with their runs, each rewritten when `write`."""
    stale = []
    for study in STUDIES:
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
