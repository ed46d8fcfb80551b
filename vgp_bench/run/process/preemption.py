"""A run stopped by SIGUSR2 (submitit's signal of a preemption or a coming timeout), once its
checkpoint is written, hands the job back to submitit, which requeues it: the requeued job
resumes the run from that checkpoint."""

from __future__ import annotations

import signal
import sys

from vgp_bench.errors import UserError
from vgp_bench.failures import one_line_error
from vgp_bench.run.process.signals import PREEMPTION_SIGNAL


class NotRequeuedError(UserError):
    """submitit did not requeue a preempted job (timed out more than max_num_timeout times)."""


def hand_over_preemption() -> None:
    """Call the SIGUSR2 handler the run found (submitit's: requeue the job and exit, or raise
    when it may not); with none (a plain process sent SIGUSR2), exit with 128 + SIGUSR2.

    Returns only where submitit leaves the requeue to another task (a rank other than 0).
    """
    handler = signal.getsignal(PREEMPTION_SIGNAL)
    if not callable(handler):
        sys.exit(128 + PREEMPTION_SIGNAL)
    try:
        handler(PREEMPTION_SIGNAL, None)
    except Exception as error:  # submitit's UncompletedJobError: no requeue
        raise NotRequeuedError(
            f"{one_line_error(error, expected=True)} The checkpoint is saved: run the sweep "
            "again to resume (hydra.launcher.max_num_timeout sets the requeues after a timeout)"
        ) from error
