"""Analysis of trained runs: posterior statistics, local and paired gaps, and the reports (the
diagnostics and figures it shares with training lie below the runner)."""
