"""A study as the READMEs see it: its folder under results/ (runs and README) and the
generated tables and values its README names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Study:
    """A study's folder name and its README's generators, by marker name."""

    name: str  # results/<name>/README.md and results/<name>/runs
    tables: Mapping[str, Callable[[], str]]  # <!-- table:NAME --> ... <!-- /table -->
    values: Mapping[str, Callable[[], str]]  # <!-- v:NAME -->...<!-- /v -->
    readme: str = ""  # the README it draws, relative to the checkout; "": results/<name>/
