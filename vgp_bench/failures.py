"""How the commands report a failure: a user's error as one line that names the fix, any other
error with its type, and the traceback in the run folder's log."""

from __future__ import annotations

import logging
import sys
from typing import NoReturn

from vgp_bench.errors import UserError

# Errors whose message is the whole story (bad settings, missing or damaged files, a full disk,
# a diverging run): the project's own types, so that a bug in the package is never shown as the
# user's mistake.
USER_ERRORS = (UserError,)


def one_line_error(error: BaseException, expected: bool = False) -> str:
    """An `expected` error (bad input, a diverging run) is its message; any other is prefixed
    with its type."""
    text = " ".join(str(error).split())
    if expected:
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def log_failure(logger: logging.Logger, error: BaseException, expected: bool = False) -> str:
    """Log `error` with its traceback; return it as one line for metrics.json."""
    logger.error("failed", exc_info=(type(error), error, error.__traceback__))
    return one_line_error(error, expected)


def print_error(command: str, error: BaseException, expected: bool) -> None:
    """`<command>: error: <one line> (<notes, e.g. where the traceback is>)` on stderr."""
    text = one_line_error(error, expected)
    notes = "; ".join(getattr(error, "__notes__", []))
    print(f"{command}: error: {text}" + (f" ({notes})" if notes else ""), file=sys.stderr)


def refuse(command: str, text: str) -> NoReturn:
    """Exit with status 1 after `<command>: error: <text on one line>` on stderr: a start
    refused before anything ran."""
    print(f"{command}: error: {' '.join(text.split())}", file=sys.stderr)
    sys.exit(1)
