"""Stop signals: SIGINT/SIGTERM (and SIGUSR2, submitit's signal of a preemption or a timeout on
SLURM) ask a run to checkpoint and stop after the current step, and abandon an evaluation at
once (a rerun redoes a validation, and resumes a final test evaluation after its finished
batches)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


class EvaluationInterrupted(BaseException):
    """A stop signal during an evaluation: it is abandoned at once; a rerun redoes it (a final
    test evaluation: from its journal's finished batches)."""


@dataclass
class StopRequest:
    """What the SIGINT/SIGTERM handler recorded; during an evaluation it raises instead."""

    signal: int | None = None
    evaluating: bool = False

    def __bool__(self) -> bool:
        return self.signal is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signal or signal.SIGTERM).name

    @property
    def preempted(self) -> bool:
        """SIGUSR2: the cluster takes the job back (submitit requeues it once it is stopped)."""
        return self.signal == PREEMPTION_SIGNAL


# submitit's signal of a preemption or a coming timeout (SUBMITIT_PREEMPT_SIGNAL, default USR2)
PREEMPTION_SIGNAL = signal.SIGUSR2


@contextmanager
def interruptible(request: StopRequest) -> Iterator[None]:
    """Inside, a stop signal abandons the work at once (raising EvaluationInterrupted)."""
    if request:
        raise EvaluationInterrupted(request.name)
    request.evaluating = True
    try:
        yield
    finally:
        request.evaluating = False


@contextmanager
def stop_signals() -> Iterator[StopRequest]:
    """Turn SIGINT/SIGTERM/SIGUSR2 into a request to checkpoint and stop after the current
    step; inside `interruptible` (evaluations) the work is abandoned at once. The handlers
    before (submitit's for SIGUSR2) are back on leaving."""
    request = StopRequest()
    previous = {}

    def handler(signum: int, _frame: Any) -> None:
        request.signal = signum
        if request.evaluating:
            request.evaluating = False  # one raise, even if the signal comes again
            raise EvaluationInterrupted(request.name)

    try:
        for signum in (signal.SIGINT, signal.SIGTERM, PREEMPTION_SIGNAL):
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    try:
        yield request
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def interrupt_once(signum: int, frame: Any) -> None:
    """SIGINT outside a run's own handling: stop the command, and ignore any further one."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def run_command(command: str, entry: Callable[[], None]) -> None:
    """Run a command's entry point: a Ctrl-C outside the run's own handling (start-up, the
    end) stops it with one line and status 130; repeated Ctrl-Cs, and any during the exit's
    clean-up (atexit), are ignored instead of printing tracebacks."""
    signal.signal(signal.SIGINT, interrupt_once)
    try:
        entry()
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the process is ending


def exit_status(signal_name: str) -> int:
    """A command's exit status after the stop signal `signal_name`: 128 + its number (130
    for SIGINT, 143 for SIGTERM), as shells and schedulers expect."""
    return 128 + int(signal.Signals[signal_name])
