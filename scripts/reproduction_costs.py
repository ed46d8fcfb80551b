#!/usr/bin/env python
"""What reproducing each Table 1 and Table 2 row costs (measured by
vgp_bench/benchmarks/reproduction_costs.py, drawn by vgp_bench/studies/reproduction.py).

    scripts/reproduction_costs.py --out results/reproduction   # costs.md and costs.json, and
                                                               # the table in README.md
    scripts/reproduction_costs.py --render                     # only redraw them from the JSON
"""

from __future__ import annotations

from vgp_bench.studies.costs_command import main

if __name__ == "__main__":
    main()
