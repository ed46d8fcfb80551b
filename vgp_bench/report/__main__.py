"""`python -m vgp_bench.report`: the same as `vgp-report`."""

import sys

from vgp_bench.report.cli import main

sys.exit(main())
