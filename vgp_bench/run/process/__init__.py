"""The process a command runs in: devices, threads, generators, ranks, signals, host memory,
preemption and how a failure is printed."""
