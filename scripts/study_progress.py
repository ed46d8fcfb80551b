#!/usr/bin/env python
"""Where each run of a study stands, from its metrics.json (the logic:
vgp_bench/studies/progress.py).

python scripts/study_progress.py RUNS_DIR [--epochs E1,E2,...]
    [--early-stopping PATIENCE,MIN_DELTA] > progress.md
"""

from __future__ import annotations

from vgp_bench.studies.progress import main

if __name__ == "__main__":
    main()
