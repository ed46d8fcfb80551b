"""Reading back the data files the package built: HDF5 attributes and "already built"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from vgp_bench.errors import CorruptDataError

FileState = Literal["match", "different", "unreadable"]


def plain_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """HDF5 attributes as plain Python values (numpy scalars to int, float, bool; for JSON)."""
    return {
        key: value.item() if isinstance(value, np.generic) else value
        for key, value in attrs.items()
    }


def existing_file_state(
    path: Path, read_attrs: Callable[[Path], Mapping[str, Any]], wanted: Mapping[str, Any]
) -> tuple[FileState, str]:
    """("match" | "different" | "unreadable", why) for a file already at `path`.

    `read_attrs` checks the file as far as its dataset wants and raises CorruptDataError when
    it cannot be used; "match" means it passed and holds every `wanted` attribute value.
    """
    try:
        attrs = read_attrs(path)
    except CorruptDataError as error:
        return "unreadable", str(error)
    differences = [
        f"{key} {attrs.get(key)!r} (wanted {value!r})"
        for key, value in wanted.items()
        if attrs.get(key) != value
    ]
    if differences:
        return "different", "; ".join(differences)
    return "match", ""
