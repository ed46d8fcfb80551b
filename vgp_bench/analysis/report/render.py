"""The report's three formats, each rendered from the same tables: markdown, LaTeX and CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from vgp_bench.analysis.markdown import markdown_table
from vgp_bench.analysis.report.tables import Table


def render_markdown(tables: Sequence[Table], header: str) -> str:
    lines = ["# vgp-report", "", header, ""]
    for table in tables:
        lines += [f"## {table.title}", ""]
        lines.append(markdown_table(table.headers, [row.cells for row in table.rows]))
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
