"""The finished batches of an IS evaluation kept on disk, so that a stopped vgp-eval resumes.

A full-test-set evaluation at S = 5000 takes about an hour of one CPU core; a session's end or
a Ctrl-C used to throw all of it away. After each batch the journal holds the per-example
estimates so far and the generator's state; a rerun of the same evaluation (same checkpoint
weights, data, settings and device) continues from the next batch and gives exactly the numbers
a run without the stop gives. Each evaluation has its own file (a hash of its fingerprint in
the name), so one evaluation never overwrites another's journal; a journal that does not
check out is set aside, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vgp_bench.files import atomic_file

JOURNAL_FORMAT = 2
FIELDS = ("log_likelihood", "bound", "pareto_k")  # per-example estimates, [done] each


def weights_sha256(modules: dict[str, nn.Module]) -> str:
    """SHA-256 of modules' state (names, dtypes, shapes and bytes): which weights are evaluated."""
    digest = hashlib.sha256()
    for module_name, module in sorted(modules.items()):
        for name, tensor in sorted(module.state_dict().items()):
            flat = tensor.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{module_name}.{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    """A short stable hash of a fingerprint (plain values), for the journal's file name."""
    text = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def journal_path(run_dir: Path, fingerprint: dict[str, Any]) -> Path:
    """`<run>/<split>_partial_k<S>_<hash>.pt`: one file per evaluation."""
    split, samples = fingerprint["split"], fingerprint["is_samples"]
    return run_dir / f"{split}_partial_k{samples}_{fingerprint_digest(fingerprint)}.pt"


def batches_in(examples: int, batch_size: int) -> int:
    """How many batches (the last one partial) cover `examples`."""
    return -(-examples // batch_size)


class EvaluationJournal:
    """Per-example estimates of the finished batches and the generator's state after them."""

    def __init__(
        self,
        run_dir: Path,
        fingerprint: dict[str, Any],
        logger: logging.Logger,
        code_version: str = "",
    ) -> None:
        self.fingerprint = fingerprint  # what must match for a resume (plain values only)
        self.path = journal_path(run_dir, fingerprint)
        self.log = logger
        self.code_version = code_version
        self.enabled = True  # False after a failed write: the evaluation goes on without it

    def restore(
        self, generator: torch.Generator, examples: int, batch_size: int
    ) -> tuple[int, dict[str, list[Tensor]]]:
        """The batches already done and their estimates; the generator is set to go on.

        No journal, one of another evaluation, an unreadable one, or one whose contents do
        not fit `examples` in batches of `batch_size`: start from batch 0, generator untouched.
        """
        empty: dict[str, list[Tensor]] = {name: [] for name in FIELDS}
        if not self.path.exists():
            return 0, empty
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
            problem = self._problem(saved, examples, batch_size)
        except Exception as error:  # torn or foreign file: never trusted, never executed
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            problem = f"unreadable ({reason or type(error).__name__})"
        if problem:
            self.log.warning("ignored the evaluation journal %s: %s", self.path.name, problem)
            return 0, empty
        if saved.get("code_version") != self.code_version:
            self.log.warning(
                "resuming a journal written by code %s with code %s",
                saved.get("code_version"),
                self.code_version,
            )
        generator.set_state(saved["generator_state"])
        batches_done = int(saved["batches_done"])
        self.log.info(
            "resumed from %s: %d batches (%d examples) done",
            self.path.name,
            batches_done,
            saved["log_likelihood"].numel(),
        )
        return batches_done, {name: [saved[name]] for name in FIELDS}

    def _problem(self, saved: Any, examples: int, batch_size: int) -> str:
        """Why `saved` cannot be resumed from, or '' when it can."""
        if not isinstance(saved, dict) or saved.get("format") != JOURNAL_FORMAT:
            return "not a journal of this format"
        if saved.get("fingerprint") != self.fingerprint:
            return "it belongs to another evaluation"
        batches_done = saved.get("batches_done")
        if not isinstance(batches_done, int) or not 0 < batches_done <= batches_in(
            examples, batch_size
        ):
            return f"batches_done={batches_done!r} does not fit {examples} examples"
        done = min(batches_done * batch_size, examples)
        for name in FIELDS:
            value = saved.get(name)
            if not isinstance(value, Tensor) or value.shape != (done,):
                return f"{name} is not {done} per-example values"
        if not isinstance(saved.get("generator_state"), Tensor):
            return "no generator state"
        return ""

    def record(
        self, batches_done: int, estimates: dict[str, list[Tensor]], generator: torch.Generator
    ) -> None:
        """Write the journal after `batches_done` batches (atomically: a stop keeps the last).

        A write that fails (a full disk) is logged and journaling stops; the evaluation goes on.
        """
        if not self.enabled:
            return
        state = {
            "format": JOURNAL_FORMAT,
            "fingerprint": self.fingerprint,
            "code_version": self.code_version,
            "batches_done": batches_done,
            "generator_state": generator.get_state(),
            **{name: torch.cat(estimates[name]) for name in FIELDS},
        }
        try:
            with atomic_file(self.path) as temporary:
                torch.save(state, temporary)
        except OSError as error:
            self.enabled = False
            self.log.warning(
                "could not write the evaluation journal %s (%s): this evaluation goes on "
                "but cannot resume if stopped",
                self.path.name,
                error,
            )

    def discard(self) -> None:
        """Remove the journal once its evaluation is recorded."""
        self.path.unlink(missing_ok=True)
