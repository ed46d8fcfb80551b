"""Freed CPU memory kept for reuse: glibc's malloc told not to hand large blocks back to the OS.

glibc serves every allocation above 32 MB (its largest mmap threshold) with a fresh mmap and
unmaps it when freed, so a tensor of that size made every step (the dense T(h) layer's 60 MB
gradient, its outputs) is faulted in page by page and zeroed by the kernel again each step:
about 20,000 page faults and 50 ms of system time a step of the two-layer DLGM's paper-form VGP
on one thread, a fifth of its CPU time (docs/performance.md). With mmap off and trimming
raised, freed blocks stay in the heap and the next step reuses them. The numbers a run
computes do not change; only where its memory comes from.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, glibc's malloc.h
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # the largest int: free memory at the heap's top is never returned
# glibc's own environment settings of the same thing: a user who set one has chosen
MALLOC_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")
OPT_OUT = "VGP_SYSTEM_MALLOC"  # set to 1 to leave malloc as the system configures it


def keep_freed_memory() -> str:
    """Turn off glibc malloc's mmap for large blocks and its trimming (Linux with glibc only,
    unless VGP_SYSTEM_MALLOC=1 or a MALLOC_* setting is in the environment); in words."""
    if os.environ.get(OPT_OUT, "").strip() not in ("", "0"):
        return f"malloc as the system sets it ({OPT_OUT} is set)"
    chosen = [name for name in MALLOC_SETTINGS if name in os.environ]
    if chosen:
        return f"malloc as the environment sets it ({', '.join(chosen)})"
    mallopt = glibc_mallopt()
    if mallopt is None:
        return "malloc as the system sets it (not glibc)"
    if not (mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "malloc as the system sets it (mallopt refused)"
    return "freed memory kept for reuse (malloc without mmap or trim)"


def glibc_mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """glibc's mallopt(param, value), or None where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
