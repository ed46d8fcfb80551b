"""What configs/ offers: the options of a config group (the families, models, data sets) and how
the report names and orders each, read from its file; no torch imported here.

A file may carry one `# report:` comment line, a YAML mapping read by the report only (a
comment, so that the composed config, and with it every run's settings, stays as it is):

    # report: {label: NF, order: 2, size: [flow_length, k]}

`label` names the option in tables (default: an inference's name in capitals, any other
group's name as it is), `order` places its rows (default: after the declared ones, by name) and
`size` is a family's size shown in its label (config key under the group, symbol). A new family,
model or data set is its module and its file: the commands, the help, the contract tests and
the report find it here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from vgp_bench.errors import ConfigError
from vgp_bench.locations import CONFIG_DIR, group_options

REPORT_LINE = re.compile(r"^# report: *(\{.*\}) *$", re.MULTILINE)
REPORT_KEYS = {"label", "order", "size"}
# The groups whose names the report capitalizes by default (VAE, VGP, HVI)
CAPITALIZED_GROUPS = ("inference",)


@dataclass(frozen=True)
class Option:
    """One file of a config group, as the report shows it."""

    name: str
    label: str
    order: float = math.inf
    size: tuple[str, str] | None = None  # (key under the group, symbol): flow_length, k


def default_option(group: str, name: str) -> Option:
    """How the report shows an option that has no file or no `# report:` line."""
    return Option(name, name.upper() if group in CAPITALIZED_GROUPS else name)


def read_option(group: str, path: Path) -> Option:
    """The option of the config file at `path`, with its `# report:` line if it has one."""
    found = REPORT_LINE.search(path.read_text())
    option = default_option(group, path.stem)
    if found is None:
        return option
    declared = OmegaConf.create(found.group(1))
    unknown = set(declared) - REPORT_KEYS if isinstance(declared, DictConfig) else {"?"}
    if unknown:
        raise ConfigError(
            f"{path}: the '# report:' line holds {found.group(1)!r}; write a mapping of "
            f"{sorted(REPORT_KEYS)}, e.g. {{label: NF, order: 2, size: [flow_length, k]}}"
        )
    size = declared.get("size")
    return Option(
        option.name,
        str(declared.get("label", option.label)),
        float(declared.get("order", option.order)),
        None if size is None else (str(size[0]), str(size[1])),
    )


@cache
def catalog(group: str, config_dir: str = CONFIG_DIR) -> dict[str, Option]:
    """Every option of `group` by name, in the report's order (declared order, then name)."""
    folder = Path(config_dir) / group
    read = [
        read_option(group, folder / f"{name}.yaml") for name in group_options(group, folder.parent)
    ]
    return {option.name: option for option in sorted(read, key=lambda o: (o.order, o.name))}


def option(group: str, name: str) -> Option:
    """How the report shows `name` of `group`; an option without a file (a run of a family
    since removed) gets the defaults."""
    return catalog(group).get(name) or default_option(group, name)


def options(group: str) -> list[str]:
    """The options of `group` in the report's order."""
    return list(catalog(group))


def rank(group: str, name: str) -> tuple[float, str]:
    """The sort key of `name` among `group`'s options: declared order, then name."""
    return (option(group, name).order, name)


# vgp-fit's name for the VAE's mean-field family (configs/inference/vae.yaml)
FIT_ALIASES = {"mean_field": "vae"}


def fit_families() -> list[str]:
    """vgp-fit's families: one per configs/inference/ file, and mean_field (the VAE's)."""
    return sorted([*group_options("inference"), *FIT_ALIASES])


def check_fit_families(names: Iterable[str]) -> None:
    """Raise a one-line ConfigError for a family `vgp-fit` does not know."""
    known = fit_families()
    unknown = [str(name) for name in names if name not in known]
    if unknown:
        raise ConfigError(f"families: unknown {', '.join(unknown)}; choose from {known}")
