"""Differences between the runs of a study, paired over the test images (the logic:
vgp_bench/studies/paired_differences.py).

    .venv/bin/python scripts/paired_differences.py STUDY_DIR OUT.json
"""

from __future__ import annotations

import sys

from vgp_bench.studies.paired_differences import main

if __name__ == "__main__":
    sys.exit(main())
