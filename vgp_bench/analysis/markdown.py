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


def markdown_table(
    headers: Sequence[object], rows: Sequence[Sequence[object]], right_aligned: int = 0
) -> str:
    """A pipe table: the header, its rule (the last `right_aligned` columns `---:`) and one line
    per row, each line ending in a newline."""
    marks = ["---"] * (len(headers) - right_aligned) + ["---:"] * right_aligned
    lines = [markdown_row(headers), markdown_row(marks)]
    return "\n".join([*lines, *(markdown_row(row) for row in rows)]) + "\n"
