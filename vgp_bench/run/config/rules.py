"""Rules for config values: each takes a value and says what is wrong with it, or None.

A rule's answer reads after the key's name: `trainer.epochs must be an integer >= 1`. This
module imports neither torch nor Hydra (the report reads the declarations written with it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

# A rule takes the value and returns what is wrong with it, or None.
Rule = Callable[[Any], str | None]


def whole_number(value: Any) -> int | None:
    """`value` as an int when it is a whole number (1000 or 1e3), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def or_null(wanted: str, optional: bool) -> str:
    """`wanted`, with " or null" when null is accepted too."""
    return wanted + (" or null" if optional else "")


def integer(minimum: int | None = None, optional: bool = False) -> Rule:
    """A whole number, at least `minimum` when given; null too when `optional`."""

    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        number = whole_number(value)
        wanted = "an integer" if minimum is None else f"an integer >= {minimum}"
        if number is None or (minimum is not None and number < minimum):
            return f"must be {or_null(wanted, optional)}"
        return None

    return rule


def number(
    positive: bool = False,
    optional: bool = False,
    at_most: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
) -> Rule:
    """A finite number (> 0 when `positive`, >= `at_least`, <= `at_most`, < `below` when
    given); null too when `optional`."""

    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and (value > 0 or not positive)
        ok = ok and (at_least is None or value >= at_least)
        ok = ok and (at_most is None or value <= at_most)
        ok = ok and (below is None or value < below)
        if not ok:
            wanted = "a positive number" if positive else "a finite number"
            wanted += "" if at_least is None else f" >= {at_least:g}"
            wanted += "" if at_most is None else f" <= {at_most:g}"
            wanted += "" if below is None else f" < {below:g}"
            return f"must be {or_null(wanted, optional)}"
        return None

    return rule


def number_list(length: int, at_least: float, below: float) -> Rule:
    """A list of `length` numbers, each in [at_least, below)."""
    item = number(at_least=at_least, below=below)

    def rule(value: Any) -> str | None:
        items = list(value) if isinstance(value, list | tuple) else []
        if len(items) != length or any(item(entry) for entry in items):
            return f"must be a list of {length} numbers in [{at_least:g}, {below:g})"
        return None

    return rule


def integer_lists(minimum: int) -> Rule:
    """A non-empty list of lists of whole numbers, each at least `minimum` (one list per
    stochastic layer)."""
    inner = integer_list(minimum)

    def rule(value: Any) -> str | None:
        items = list(value) if isinstance(value, list | tuple) else []
        if not items or any(inner(entry) for entry in items):
            return f"must be a list of lists of integers >= {minimum}"
        return None

    return rule


def boolean(value: Any) -> str | None:
    """true or false."""
    return None if isinstance(value, bool) else "must be true or false"


def one_of(*choices: str, optional: bool = False) -> Rule:
    """One of the names `choices`; null too when `optional`."""

    def rule(value: Any) -> str | None:
        if (value is None and optional) or (isinstance(value, str) and value in choices):
            return None
        return f"must be {or_null(' or '.join(choices), optional)}"

    return rule


def text(optional: bool = False) -> Rule:
    """A name or a path: a string (digits too, which Hydra reads as a number); null too when
    `optional`."""

    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return None
        return f"must be {or_null('a string', optional)}"

    return rule


def integer_list(minimum: int, length: int | None = None, non_empty: bool = False) -> Rule:
    """A list of whole numbers, each at least `minimum` (of `length` items, or at least one
    when `non_empty`, where given)."""

    def rule(value: Any) -> str | None:
        items = list(value) if isinstance(value, list | tuple) else None
        if (
            items is None
            or (length is not None and len(items) != length)
            or (non_empty and not items)
            or any(whole_number(item) is None or whole_number(item) < minimum for item in items)
        ):
            what = "a non-empty list of" if non_empty else "a list of"
            what = f"a list of {length}" if length is not None else what
            return f"must be {what} integers >= {minimum}"
        return None

    return rule


def non_empty_list(value: Any) -> str | None:
    """A list with at least one item."""
    return None if isinstance(value, list | tuple) and value else "must be a non-empty list"


def threads_rule(value: Any) -> str | None:
    """`threads`: a count >= 1 or null, also as VGP_THREADS's text (runtime.thread_count)."""
    from vgp_bench.errors import ConfigError
    from vgp_bench.run.process.runtime import thread_count

    try:
        thread_count(value)
    except ConfigError:
        return "must be an integer >= 1 or null (torch's default; env VGP_THREADS)"
    return None


def threads_value(value: Any) -> int | None:
    """`threads`' value as its count (None: torch's default), as `threads_rule` accepts it."""
    from vgp_bench.run.process.runtime import thread_count

    return thread_count(value)


DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def device_name(value: Any) -> str | None:
    """`device`: auto, cpu, cuda or cuda:N (runtime.resolve_device)."""
    if isinstance(value, str) and DEVICE.fullmatch(value):
        return None
    return "must be auto, cpu, cuda or cuda:N"


def target_node(value: Any) -> str | None:
    """A node that Hydra builds: a mapping with a `_target_` naming a class or function."""
    if isinstance(value, dict) and isinstance(value.get("_target_"), str):
        return None
    return "must be a node with a _target_ (the class or function it builds)"
