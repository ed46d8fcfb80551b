"""`python -m vgp_bench.analysis.report`: the same as `vgp-report`."""

import sys

from vgp_bench.analysis.report.cli import main

sys.exit(main())
