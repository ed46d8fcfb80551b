"""Freed CPU memory kept for reuse: glibc's malloc told not to hand large blocks back to the OS.

glibc serves every allocation above 32 MB (its largest mmap threshold) with a fresh mmap and
unmaps it when freed, so a tensor of that size made every step (the dense T(h) layer's 60 MB
gradient, its outputs) is faulted in page by page and zeroed by the kernel again each step:
about 27,000 page faults and 50 ms of system time a step of the two-layer DLGM's paper-form VGP
on one thread, a fifth of its CPU time (docs/performance.md). With mmap off and trimming
raised, freed blocks stay in the heap and the next step reuses them. The numbers a run
computes do not change; only where its memory comes from. The commands call it (vgp-train,
vgp-eval, vgp-fit, the bench), the library functions do not.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, glibc's malloc.h
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # the largest int: free memory at the heap's top is never returned
OPT_OUT = "VGP_SYSTEM_MALLOC"  # set to 1 to leave malloc as the system configures it
PRELOADED_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


def users_malloc_setting(environ: dict[str, str]) -> str | None:
    """The environment's own choice about malloc, if any: glibc's MALLOC_* settings or
    malloc tunables, or another allocator preloaded."""
    chosen = sorted(name for name in environ if name.startswith("MALLOC_"))
    if "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        chosen.append("GLIBC_TUNABLES")
    preloaded = environ.get("LD_PRELOAD", "")
    if any(allocator in preloaded for allocator in PRELOADED_ALLOCATORS):
        chosen.append("LD_PRELOAD")
    return ", ".join(chosen) or None


def keep_freed_memory() -> str:
    """Turn off glibc malloc's mmap for large blocks and its trimming (Linux with glibc only,
    unless VGP_SYSTEM_MALLOC=1 or the environment chose about malloc); in words."""
    if os.environ.get(OPT_OUT, "").strip() not in ("", "0"):
        return f"malloc as the system sets it ({OPT_OUT} is set)"
    chosen = users_malloc_setting(dict(os.environ))
    if chosen:
        return f"malloc as the environment sets it ({chosen})"
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
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
