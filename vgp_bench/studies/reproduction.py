"""What reproducing each Table 1 and Table 2 row costs (results/reproduction): costs.md and the
top-level README's table drawn from costs.json, which vgp_bench/benchmarks/reproduction_costs.py
measures (studies/costs_command.py measures and draws them)."""

from __future__ import annotations

from typing import Any

from vgp_bench.analysis.markdown import markdown_table

COSTS_HEADER = [
    "command", "epochs x steps", "CPU ms / step", "validation each epoch (images x S)",
    "training CPU-h", "test images x S", "test CPU-h", "kernels / step",
    "GPU ms / step (model)", "training GPU-h (model)", "test GPU-h (model)",
]  # fmt: skip
README_HEADER = ["command", "training CPU-h", "test CPU-h", "GPU-h, training + test (model)"]


def number_cell(value: float) -> str:
    """A number for the table: whole from 100, one decimal from 1, else two significant
    digits."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:#.2g}"


def range_cell(values: list[float]) -> str:
    """A model's (low, high) range as text."""
    low, high = values
    return f"{number_cell(low)}–{number_cell(high)}"


def test_work_cell(row: dict[str, Any]) -> str:
    """A row's test evaluations: images x samples (the final one's, plus those at epochs)."""
    work = row["test_evaluations"]
    extra = work["samples"] - row["test_is_samples"]
    return f"{work['images']} x {row['test_is_samples']}" + (f" (+{extra})" if extra else "")


def validation_cell(row: dict[str, Any]) -> str:
    """A row's validation after every epoch: images x samples, or none."""
    work = row["validation"]
    return f"{work['images']} x {work['samples']}" if work["images"] else "none"


def conditions(record: dict[str, Any]) -> str:
    """costs.md's first paragraph: when, at which code, under what load it was measured."""
    rows = list(record["rows"].values())
    versions = sorted({row["code_version"] for row in rows})
    times = sorted(row["measured"] for row in rows)
    notes = sorted({row["note"] for row in rows if row["note"]})
    return (
        f"Measured {times[0]} to {times[-1]} at {', '.join(versions)}, one thread"
        + "".join(f"; {note}" for note in notes)
        + " (each row's load average at its start is in costs.json; with other jobs running the "
        "CPU times are upper bounds for an idle core). Table 2's rows are timed on synthetic "
        "images of Sketch's shape and sizes (56x56, 18,000 train, 2,000 test; Sketch has no "
        "validation split). Training: the steps plus the validation bound after every epoch; "
        "not counted: the VGP's per-epoch head statistics, sample images and checkpoints. Test "
        "images x S: the final test evaluation, plus the samples of the evaluations at "
        "trainer.eval_at_epochs."
    )


def gpu_model_note(gpu: dict[str, Any]) -> str:
    """costs.md's second paragraph: the GPU columns' model and its constants."""
    return (
        f"**The GPU columns are a model, not a measurement** ({gpu['name']}; no GPU has been "
        "lent to this project): the kernels of one traced step and of one traced evaluation "
        f"batch, each at least {gpu['min_kernel_seconds'] * 1e6:g} µs, else its FLOPs or bytes "
        f"at {gpu['achieved_fraction']:g} of the peak "
        f"({gpu['peak_flops_per_second'] / 1e12:g} TFLOP/s, "
        f"{gpu['peak_bytes_per_second'] / 1e12:g} TB/s), and an assumed host cost of "
        f"{gpu['host_seconds_per_kernel'][0] * 1e6:g} to "
        f"{gpu['host_seconds_per_kernel'][1] * 1e6:g} µs a kernel; low: host and device "
        "overlapped, high: one after the other (which also covers waits at host syncs). "
        "`make gpu-check` on a GPU measures the steps."
    )


def costs_row(row: dict[str, Any]) -> list[object]:
    """A row of costs.md: the command, its CPU times measured and its GPU times modelled."""
    model = row["gpu_model"]
    return [
        f"`{row['command']}`",
        f"{row['epochs']} x {row['steps'] // row['epochs']}",
        f"{row['step_ms']:.1f}",
        validation_cell(row),
        number_cell(row["training_cpu_hours"]),
        test_work_cell(row),
        number_cell(row["evaluation_cpu_hours"]),
        model["step"]["kernels"],
        range_cell(model["step_ms"]),
        range_cell(model["training_hours"]),
        range_cell(model["evaluation_hours"]),
    ]


def markdown(record: dict[str, Any]) -> str:
    """costs.md: the intro with the conditions, then a row per experiment."""
    rows = [costs_row(row) for row in record["rows"].values()]
    table = markdown_table(COSTS_HEADER, rows, right_aligned=10)
    return "\n".join([conditions(record), "", gpu_model_note(record["gpu"]), "", table])


def readme_table(record: dict[str, Any]) -> str:
    """The README's short form of costs.md: each row's command and hours."""
    rows = []
    for row in record["rows"].values():
        model = row["gpu_model"]
        gpu = [
            train + test
            for train, test in zip(model["training_hours"], model["evaluation_hours"], strict=True)
        ]
        rows.append(
            [
                f"`{row['command']}`",
                number_cell(row["training_cpu_hours"]),
                number_cell(row["evaluation_cpu_hours"]),
                range_cell(gpu),
            ]
        )
    return markdown_table(README_HEADER, rows, right_aligned=3)
