"""The command line's values of the keys Hydra's schemas type (run/config/store.py), checked by
their declared rules before Hydra composes: a bad one is one line naming the key and what it
takes, where Hydra would refuse it during composition in a message of many lines."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from vgp_bench.failures import refuse
from vgp_bench.run.config.schema import EVAL_KEYS, FIT_KEYS, TOP_LEVEL_KEYS, TRAINER_KEYS, Key

# The keys each command's schemas type: vgp-train's top level, trainer and eval; vgp-eval's
# eval; vgp-fit's own
TYPED_KEYS: dict[str, dict[str, Key]] = {
    "vgp-train": {key.name: key for key in (*TOP_LEVEL_KEYS, *TRAINER_KEYS, *EVAL_KEYS)},
    "vgp-eval": {key.name: key for key in EVAL_KEYS},
    "vgp-fit": {key.name: key for key in FIT_KEYS},
}


def override_values(argument: str) -> tuple[str, list[Any]] | None:
    """The key of one command-line argument and each value it sets (every value of a sweep
    `a=1,abc` or `a=range(3)`); None for a Hydra option, a deletion or what does not parse (Hydra
    reports that itself)."""
    if argument.startswith("-"):
        return None
    try:
        (override,) = OverridesParser.create().parse_overrides([argument])
    except HydraException:
        return None
    if override.is_delete():
        return None
    if not override.is_sweep_override():
        return override.key_or_group, [override.value()]
    try:
        return override.key_or_group, list(override.sweep_iterator())
    except HydraException:  # a glob or an interval: no values to list
        return None


def command_line_problem(command: str, arguments: Iterable[str]) -> str | None:
    """The first value of `arguments` (a command line) that breaks its typed key's rule, in
    one line as the settings checks say it (settings.check_settings), or None."""
    keys = TYPED_KEYS.get(command, {})
    for argument in arguments:
        found = override_values(argument)
        if found is None or found[0] not in keys:
            continue
        key = keys[found[0]]
        for value in found[1]:
            if isinstance(value, str) and value.startswith("${"):
                continue  # an interpolation: checked once the config is composed
            problem = key.rule(value)
            if problem:
                return f"{key.name} {problem}, got {value!r}"
    return None


def refuse_bad_command_line(command: str, arguments: Sequence[str]) -> None:
    """Exit with status 1 and one line on stderr when `command_line_problem` finds one."""
    problem = command_line_problem(command, arguments)
    if problem:
        refuse(command, problem)
