"""Analysis of trained runs: diagnostics, posterior statistics, gaps, figures and reports."""
