#!/usr/bin/env python
"""`make gpu-check`: every CUDA path of the runner run and timed by one command, one JSON (the
logic: vgp_bench/benchmarks/gpu_check.py; --help lists the parts and options)."""

from __future__ import annotations

import sys

from vgp_bench.benchmarks.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
