"""Regenerate the numbers of the results READMEs from the committed runs (no hand copies).

The studies are code of the package (vgp_bench/studies: one declaration per study); this is
their entry point, as `python -m vgp_bench.studies` is.

    .venv/bin/python scripts/results_readme.py          # rewrite the READMEs
    .venv/bin/python scripts/results_readme.py --check  # exit 1 if one is out of date
"""

from __future__ import annotations

import sys

from vgp_bench.studies.readme import main

if __name__ == "__main__":
    sys.exit(main())
