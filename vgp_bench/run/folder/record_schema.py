"""The typed schema of metrics.json: each key a record declares (`metrics.Key[T]`) holds a value
of type T or null, checked when a record is read, so a file of the wrong shape is named before
any work rather than read as a run. Torch-free: the report reads records with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args, get_origin

# what a value of each declared type reads as, for messages
TYPE_WORDS = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "an object",
    list: "a list",
}


def declared_keys(kind: type) -> Iterator[tuple[str, Any]]:
    """(attribute, Key) for each key a record class declares, its bases' included (a key
    says what it `holds`: metrics.Key, RecordKey, RecordListKey)."""
    seen: set[str] = set()
    for klass in kind.__mro__:
        for name, key in vars(klass).items():
            if isinstance(getattr(key, "holds", None), str) and name not in seen:
                seen.add(name)
                yield name, key


def value_type(key: Any) -> type | None:
    """The Python type a `Key[T]` declares (dict and list for `dict[...]`, `list[...]`)."""
    declared = get_args(getattr(key, "__orig_class__", None))
    if not declared:
        return None
    kind = declared[0]
    return get_origin(kind) or kind


def fits(value: Any, kind: type) -> bool:
    """Whether a JSON value is of the declared type (an integer is a number; true is no
    number)."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind)


# JSON's names of the kinds of value, for messages (bool before int: true is an int in Python)
JSON_KINDS = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (dict, "object"),
    (list, "list"),
)


def found_word(value: Any) -> str:
    """A value found in the file, with its JSON kind, shortened: `integer 5`."""
    kind = next((word for python, word in JSON_KINDS if isinstance(value, python)), "value")
    return f"{kind} {value!r}"[:60]


def record_problem(data: dict[str, Any], kind: type, where: str = "") -> str | None:
    """What in `data` breaks the schema of the record class `kind`, or None (keys it does not
    declare, and nulls, are not checked: older and newer code write them)."""
    for _, key in declared_keys(kind):
        value = data.get(key.name)
        if value is None:
            continue
        name = f"{where}{key.name}"
        if key.holds == "record":
            if not isinstance(value, dict):
                return f"'{name}' must be an object, got {found_word(value)}"
            problem = record_problem(value, key.kind, f"{name}.")
        elif key.holds == "records":
            if not isinstance(value, list):
                return f"'{name}' must be a list, got {found_word(value)}"
            problem = None
            for index, item in enumerate(value):
                if not isinstance(item, dict):
                    return f"'{name}[{index}]' must be an object, got {found_word(item)}"
                problem = problem or record_problem(item, key.kind, f"{name}[{index}].")
        else:
            wanted = value_type(key)
            problem = None
            if wanted is not None and not fits(value, wanted):
                problem = f"'{name}' must be {TYPE_WORDS[wanted]}, got {found_word(value)}"
        if problem:
            return problem
    return None
