"""Markdown tables, the one renderer of the report (vgp-report) and the results READMEs
(scripts/results_readme.py)."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_cell(text: object) -> str:
    """A cell's text, its pipes escaped (a bare `|` would end the cell)."""
    return str(text).replace("|", "\\|")


def markdown_row(cells: Sequence[object]) -> str:
    """One table row: `| a | b |`."""
    return "| " + " | ".join(markdown_cell(cell) for cell in cells) + " |"


def markdown_table(headers: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """A pipe table: the header, its rule and one line per row, each line ending in a newline."""
    lines = [markdown_row(headers), markdown_row(["---"] * len(headers))]
    return "\n".join([*lines, *(markdown_row(row) for row in rows)]) + "\n"
