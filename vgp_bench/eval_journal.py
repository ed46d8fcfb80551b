"""The finished batches of an IS evaluation kept on disk, so that a stopped vgp-eval resumes.

A full-test-set evaluation at S = 5000 takes about an hour of one CPU core; a session's end or
a Ctrl-C used to throw all of it away. After each batch the journal holds the per-example
estimates so far and the generator's state; a rerun of the same evaluation (same checkpoint
bytes, same settings, same rank) continues from the next batch and gives exactly the numbers
a run without the stop gives. Anything else found there is set aside, never trusted.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vgp_bench.data.store import atomic_file

JOURNAL_FORMAT = 1
FIELDS = ("log_likelihood", "bound", "pareto_k")  # per-example estimates, [done] each


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def journal_path(run_dir: Path, split_name: str, is_samples: int, rank: int = 0) -> Path:
    """Where the journal of one evaluation (split, S, rank) lives in its run folder."""
    suffix = f"_rank{rank}" if rank else ""
    return run_dir / f"{split_name}_partial_k{is_samples}{suffix}.pt"


class EvaluationJournal:
    """Per-example estimates of the finished batches and the generator's state after them."""

    def __init__(self, path: Path, fingerprint: dict[str, Any], logger: logging.Logger) -> None:
        self.path = path
        self.fingerprint = fingerprint  # what must match for a resume (plain values only)
        self.log = logger

    def restore(self, generator: torch.Generator) -> tuple[int, dict[str, list[Tensor]]]:
        """The batches already done and their estimates; the generator is set to go on.

        No journal, or one of another evaluation (other checkpoint bytes, settings or
        rank), or an unreadable one: start from batch 0.
        """
        empty: dict[str, list[Tensor]] = {name: [] for name in FIELDS}
        if not self.path.exists():
            return 0, empty
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
            matches = (
                isinstance(saved, dict)
                and saved.get("format") == JOURNAL_FORMAT
                and saved.get("fingerprint") == self.fingerprint
            )
        except Exception as error:  # torn or foreign file: never trusted, never executed
            self.log.warning("ignored the unreadable evaluation journal %s (%s)", self.path, error)
            return 0, empty
        if not matches:
            self.log.info("ignored %s: it belongs to another evaluation", self.path.name)
            return 0, empty
        generator.set_state(saved["generator_state"])
        batches_done = int(saved["batches_done"])
        self.log.info(
            "resumed from %s: %d batches (%d examples) done",
            self.path.name,
            batches_done,
            saved["log_likelihood"].numel(),
        )
        return batches_done, {name: [saved[name]] for name in FIELDS}

    def record(
        self, batches_done: int, estimates: dict[str, list[Tensor]], generator: torch.Generator
    ) -> None:
        """Write the journal after `batches_done` batches (atomically: a stop keeps the last)."""
        state = {
            "format": JOURNAL_FORMAT,
            "fingerprint": self.fingerprint,
            "batches_done": batches_done,
            "generator_state": generator.get_state(),
            **{name: torch.cat(estimates[name]) for name in FIELDS},
        }
        with atomic_file(self.path) as temporary:
            torch.save(state, temporary)

    def discard(self) -> None:
        """Remove the journal once its evaluation is recorded."""
        self.path.unlink(missing_ok=True)
