"""The text of a study table's cells and of the READMEs' generated numbers, and the tables
themselves (analysis/report's markdown renderer)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from vgp_bench.analysis.markdown import markdown_table
from vgp_bench.analysis.report.rows import MISSING, Estimate


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table, its rule spaced as the READMEs write it."""
    return markdown_table(header, rows)


def signed(value: float, digits: int = 2) -> str:
    """+1.23 / -1.23 (a minus zero shows as -0.00, as the reports print it)."""
    return f"{value:+.{digits}f}"


def plural(count: int, noun: str) -> str:
    """'1 epoch', '2 epochs'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def number(value: float | None, fmt: str) -> str:
    """A formatted number, or — when there is none."""
    return MISSING if value is None or not math.isfinite(value) else format(value, fmt)


def share_cell(share: float | None) -> str:
    """A share as a percentage, or — when there is none."""
    return MISSING if share is None or not math.isfinite(share) else f"{100 * share:.1f}%"


def mean_cell(values: Sequence[float | None], digits: int = 3) -> str:
    """The mean over seeds of a statistic, or a dash where a family has none."""
    present = [value for value in values if value is not None]
    return f"{statistics.fmean(present):.{digits}f}" if present else MISSING


def estimate_text(value: Estimate) -> str:
    """An estimate as mean ± standard error, two decimals."""
    return f"{value.mean:.2f} ± {value.stderr:.2f}"


def evaluation_cell(evaluation: dict[str, Any], key: str) -> str:
    """An evaluation's quantity with its standard error over the test images."""
    return f"{evaluation[key]:.2f} ± {evaluation[f'{key}_stderr']:.2f}"


def estimate_cell(metrics: dict[str, Any], evaluation: dict[str, Any], key: str) -> str:
    """IS or bound with its standard error, flagged when the runner judged the run diverged."""
    cell = evaluation_cell(evaluation, key)
    return f"{cell} (diverged)" if metrics.get("diverged") else cell


def difference_cell(diff: float, se: float, digits: int = 2) -> str:
    """+0.23 ± 0.16 (1.4 SE); the standard error with `digits` decimals (no ratio where the
    standard error is zero or not a number)."""
    if not (se > 0 and math.isfinite(se)):
        return f"{signed(diff)} ± {se:.{digits}f}"
    ratio = abs(diff) / se
    return f"{signed(diff)} ± {se:.{digits}f} ({ratio:.{1 if ratio < 10 else 0}f} SE)"


def test_image_noise(diff: float, se: float) -> str:
    """A difference with its standard error paired over the test images, without the ratio
    that would read as the strength of a result: the test images' noise alone."""
    return f"{signed(diff)} ± {se:.3f}"


def data_format(dataset: dict[str, Any]) -> str:
    """The data file a run or an evaluation read, in words: its format and content digest."""
    digest = dataset.get("content_sha256")
    return f"format {dataset.get('format_version')}" + (f", {digest[:8]}" if digest else "")


def draw_of(data: dict[str, Any]) -> str:
    """The binary draw of the test images a test read, in words."""
    if data.get("binarization") == "dynamic":
        return f"drawn once with seed {data.get('eval_binarization_seed')}"
    return "the file's own draw"


def aux_gap_cell(metrics: dict[str, Any], evaluation: dict[str, Any]) -> str:
    """The auxiliary gap with its standard error and the test images it was measured on, from
    the evaluation shown or else the end-of-training test (VGP; — for a family without r)."""
    record = evaluation if "aux_gap" in evaluation else (metrics.get("test") or {})
    gap = record.get("aux_gap")
    if gap is None or not math.isfinite(gap):
        return MISSING
    stderr = record.get("aux_gap_stderr")
    cell = f"{gap:.2f}" if stderr is None else f"{gap:.2f} ± {stderr:.2f}"
    images = record.get("aux_gap_examples")
    return cell if images is None else f"{cell} ({images} images)"
