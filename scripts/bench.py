#!/usr/bin/env python
"""`make bench`: each training step against its floor, the runner against plain loops, and the
targets met or missed (vgp_bench/benchmarks/bench.py; --help lists the options).

    .venv/bin/python scripts/bench.py --out bench/results.json [--quick] [--threads N]
"""

from __future__ import annotations

from vgp_bench.benchmarks.bench import main

if __name__ == "__main__":
    main()
