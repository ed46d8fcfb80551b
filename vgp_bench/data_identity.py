"""What identifies the contents of a run's data: the keys of a dataset's info (and of the
`dataset` a run's metrics.json records) that change when the data file does. Torch-free: the
report reads it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# The source's digest, the file's format and content digest, its fixed binary draw; Sketch's
# preprocessing. The settings that choose among a file's contents are config keys instead.
DATA_IDENTITY_KEYS = (
    "sha256",
    "content_sha256",
    "format_version",
    "binarization_seed",
    "binary_origin",
    "preprocessing",
)


def data_identity(info: Mapping[str, Any]) -> dict[str, Any]:
    """The identity keys of a dataset's info (or of a recorded `dataset`) that it states."""
    return {key: info[key] for key in DATA_IDENTITY_KEYS if info.get(key) is not None}


def as_recorded(value: Any) -> Any:
    """A value as metrics.json gives it back (tuples become lists, numbers stay numbers)."""
    return json.loads(json.dumps(value, default=str))


def data_changes(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, list]:
    """`{key: [recorded, current]}` for each identity key whose value differs between the data
    a run recorded and the data now loaded; a key the record does not state (older code) is
    not compared."""
    return {
        key: [value, current.get(key)]
        for key, value in data_identity(recorded).items()
        if as_recorded(current.get(key)) != as_recorded(value)
    }


def describe_changes(changes: Mapping[str, list]) -> str:
    """The changes in a line: a dict's differing entries by name, long values shortened."""

    def short(value: Any) -> str:
        text = str(value)
        return repr(text if len(text) <= 16 else f"{text[:12]}...")

    parts = []
    for key, (old, new) in changes.items():
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            old, new = as_recorded(old), as_recorded(new)
            differing = sorted(
                name for name in old.keys() | new.keys() if old.get(name) != new.get(name)
            )
            parts += [
                f"{key}.{name} {short(old.get(name))} -> {short(new.get(name))}"
                for name in differing
            ]
        else:
            parts.append(f"{key} {short(old)} -> {short(new)}")
    return ", ".join(parts)
