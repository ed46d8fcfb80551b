"""Throughput benchmarks (`make bench`): numbers, never pass/fail tests."""
