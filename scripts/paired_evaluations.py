"""A run's test evaluations on its own data and on other data, paired over the test images
(the logic: vgp_bench/studies/paired_evaluations.py).

    .venv/bin/python scripts/paired_evaluations.py STUDY_DIR OUT.json
"""

from __future__ import annotations

import sys

from vgp_bench.studies.paired_evaluations import main

if __name__ == "__main__":
    sys.exit(main())
