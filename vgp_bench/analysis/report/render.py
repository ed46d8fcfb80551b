"""The report's three formats, each rendered from the same tables: markdown, LaTeX and CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from vgp_bench.analysis.report.tables import Table


def markdown_cell(text: str) -> str:
    """A cell's text with its pipes escaped."""
    return text.replace("|", "\\|")


def markdown_row(cells: Sequence[object]) -> str:
    """One markdown table row, each cell's text escaped."""
    return "| " + " | ".join(markdown_cell(str(cell)) for cell in cells) + " |"


def markdown_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    spaced_rule: bool = False,
    right_aligned: int = 0,
) -> list[str]:
    """A markdown table's lines; the rule under the header `|---|` or, spaced, `| --- |`, its
    last `right_aligned` columns `---:`."""
    marks = ["---"] * (len(headers) - right_aligned) + ["---:"] * right_aligned
    rule = markdown_row(marks) if spaced_rule else "|" + "|".join(marks) + "|"
    return [markdown_row(headers), rule, *(markdown_row(row) for row in rows)]


def render_markdown(tables: Sequence[Table], header: str) -> str:
    lines = ["# vgp-report", "", header, ""]
    for table in tables:
        lines += [f"## {table.title}", ""]
        lines += markdown_table(table.headers, [row.cells for row in table.rows])
        lines.append("")
        lines += [f"- {note}" for note in table.notes]
        lines.append("")
    return "\n".join(lines)


LATEX_CHARACTERS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "—": "--",
    "‡": r"\ddag{}",
    "§": r"\S{}",
    "≤": r"$\leq$",
    "<": r"$<$",
    ">": r"$>$",
    "|": r"$|$",
}


def latex_escape(text: str) -> str:
    return "".join(LATEX_CHARACTERS.get(character, character) for character in text)


def render_latex(tables: Sequence[Table], header: str) -> str:
    lines = ["% vgp-report; needs \\usepackage{booktabs}", f"% {header}", ""]
    for table in tables:
        lines += [
            "\\begin{table}[t]",
            "\\centering",
            "\\footnotesize",
            f"\\caption{{{latex_escape(table.title)}}}",
            "\\begin{tabular}{" + "l" * len(table.headers) + "}",
            "\\toprule",
            " & ".join(latex_escape(h) for h in table.headers) + " \\\\",
            "\\midrule",
        ]
        lines += [" & ".join(latex_escape(c) for c in row.cells) + " \\\\" for row in table.rows]
        lines += ["\\bottomrule", "\\end{tabular}", ""]
        lines += ["\\par " + latex_escape(note) for note in table.notes]
        lines += ["\\end{table}", ""]
    return "\n".join(lines)


CSV_FIELDS = [
    "table",
    "method",
    "dataset",
    "model",
    "inference",
    "objective",
    "aux_samples",
    "train_objective",
    "train_samples",
    "binarization",
    "merge_valid",
    "is_samples",
    "test_examples",
    "n",
    "seeds",
    "quantity",
    "epoch",
    "mean",
    "stderr",
    "stderr_over",
    "paper",
    "difference",
    "folders",
    "folder",
    "status",
    "error",
    "evaluation",
]


def render_csv(tables: Sequence[Table]) -> str:
    """One line per quantity of every row of every table."""
    records = [line for table in tables for row in table.rows for line in row.records]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()
