"""Freed CPU memory kept for reuse (run/process/host_memory.py): who decides, and the effect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vgp_bench.run.process import host_memory

FAULTS = """
import resource, torch
from vgp_bench.run.process.host_memory import keep_freed_memory
print(keep_freed_memory())
for _ in range(30):  # 64 MB blocks made, written and freed in turn, as a step's gradient
    torch.empty(16 * 2**20).fill_(1.0)  # (the heap grows over the first few, then settles)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    torch.empty(16 * 2**20).fill_(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def is_malloc_setting(name: str) -> bool:
    """Whether an environment variable can set glibc malloc's options (or replace malloc)."""
    return name.startswith("MALLOC_") or name in ("GLIBC_TUNABLES", "LD_PRELOAD")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """mallopt replaced by a recorder; no malloc setting in the environment."""
    for name in list(os.environ):
        if is_malloc_setting(name):
            monkeypatch.delenv(name)
    monkeypatch.delenv(host_memory.OPT_OUT, raising=False)
    made: list[tuple[int, int]] = []

    def mallopt(parameter: int, value: int) -> int:
        made.append((parameter, value))
        return 1

    monkeypatch.setattr(host_memory, "glibc_mallopt", lambda: mallopt)
    return made


def test_malloc_keeps_freed_memory_without_mmap_or_trim(calls: list) -> None:
    assert host_memory.keep_freed_memory().startswith("freed memory kept for reuse")
    assert calls == [(host_memory.M_MMAP_MAX, 0), (host_memory.M_TRIM_THRESHOLD, 2**31 - 1)]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (host_memory.OPT_OUT, "1"),
        ("MALLOC_MMAP_MAX_", "65536"),
        ("MALLOC_ARENA_MAX", "2"),
        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"),
        ("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
    ],
)
def test_a_users_malloc_setting_is_left_alone(
    calls: list, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert name in host_memory.keep_freed_memory()
    assert calls == []


def test_other_tunables_or_preloads_are_no_malloc_setting(calls: list, monkeypatch) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libfaketime.so")
    monkeypatch.setenv(host_memory.OPT_OUT, "0")
    assert host_memory.keep_freed_memory().startswith("freed memory kept for reuse")
    assert len(calls) == 2


def test_another_c_library_is_left_alone(monkeypatch: pytest.MonkeyPatch, calls: list) -> None:
    monkeypatch.setattr(host_memory, "glibc_mallopt", lambda: None)
    assert host_memory.keep_freed_memory() == "malloc as the system sets it (not glibc)"


@pytest.mark.skipif(host_memory.glibc_mallopt() is None, reason="glibc's malloc only")
def test_a_large_block_freed_and_made_again_is_not_faulted_in_again() -> None:
    """64 MB blocks made and freed in turn: faulted in afresh each time by default (16,384
    faults a block with 4 KiB pages, about 32 with transparent huge pages), almost none once
    freed memory is kept (after the heap has grown to fit the pattern)."""

    def faults(opt_out: str) -> int:
        env = {key: value for key, value in os.environ.items() if not is_malloc_setting(key)}
        env[host_memory.OPT_OUT] = opt_out
        out = subprocess.run(
            [sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True, check=True
        ).stdout.split("\n")
        return int(out[1])

    kept, system = faults("0"), faults("1")
    assert kept < 100 and system >= 10 * 30 and system > 20 * kept, (kept, system)
