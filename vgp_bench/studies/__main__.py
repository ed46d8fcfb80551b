"""`python -m vgp_bench.studies [--check]`: the results READMEs from the committed runs."""

import sys

from vgp_bench.studies.readme import main

sys.exit(main())
