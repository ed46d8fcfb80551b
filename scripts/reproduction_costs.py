#!/usr/bin/env python
"""What reproducing each Table 1 row costs on this machine: its command, its training steps,
the measured time of a step and of its test evaluation, and the CPU-hours they add up to.

    scripts/reproduction_costs.py --out results/reproduction   # costs.md and costs.json

Each row is its `configs/experiment/` file as `vgp-train experiment=<name>` runs it: steps =
trainer.epochs x batches per epoch (a run that stops early costs less); a step is timed on a
few steps of the real loop (untrained parameters: the time depends on shapes, not values); the
test evaluation (S = eval.is_samples, here the tables' 5000, on the 10,000 test images) from
one timed eval batch (`vgp_bench/benchmarks/evaluation_time.py`). One process, one thread.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from vgp_bench.benchmarks.evaluation_time import TEST_IMAGES, evaluation_seconds
from vgp_bench.benchmarks.families import data_overrides
from vgp_bench.benchmarks.overhead import make_trainer, run_steps
from vgp_bench.run.runtime import compose_config

ROWS = [
    "burda_dlgm1_vae",
    "table1_dlgm1_vae",
    "table1_dlgm1_vgp",
    "table1_dlgm1_nf",
    "table1_dlgm1_hvi",
    "table1_dlgm2_vae",
    "table1_dlgm2_iwae",
    "table1_dlgm2_vgp",
    "table1_dlgm2_vgp_iwae",
    "table1_draw_vae",
    "table1_draw_vgp",
]
SLOW = ("draw",)  # a step takes seconds: time fewer steps and fewer samples


def row_cost(name: str) -> dict[str, Any]:
    """The measured costs of `vgp-train experiment=<name>` on this machine."""
    cfg = compose_config([*data_overrides(), f"experiment={name}"])  # as vgp-train composes it
    trainer = make_trainer([f"experiment={name}"])  # (the bench's: no checkpoints, no end)
    slow = any(word in name for word in SLOW)
    run_steps(trainer, 1 if slow else 3)  # warm-up
    step_seconds = run_steps(trainer, 2 if slow else 20)
    train = trainer.parts.data.train
    batches = train.batch_count(int(cfg.trainer.batch_size), bool(cfg.trainer.drop_last))
    steps = int(cfg.trainer.epochs) * batches
    samples = int(cfg.eval.is_samples)
    timed = evaluation_seconds([f"experiment={name}"], 100 if slow else 1000)
    evaluation_hours = (
        timed["seconds"] * (TEST_IMAGES / timed["images_timed"]) * (samples / timed["samples"])
    ) / 3600
    return {
        "command": f"vgp-train experiment={name}",
        "epochs": int(cfg.trainer.epochs),
        "steps": steps,
        "batch_size": int(cfg.trainer.batch_size),
        "step_ms": round(1000 * step_seconds, 2),
        "training_cpu_hours": round(steps * step_seconds / 3600, 1),
        "test_is_samples": samples,
        "evaluation_cpu_hours": round(evaluation_hours, 2),
    }


def markdown(record: dict[str, Any]) -> str:
    lines = [
        f"Measured {record['measured']} at {record['code_version']}, one thread, load average "
        f"{record['load_average']} at start{record.get('note', '')} (with other jobs running "
        "the times are upper bounds for an idle core). GPU: not measured (no GPU has been lent "
        "to this project; `make gpu-check` on one gives its step times).",
        "",
        "| command | epochs x steps | ms / step | training CPU-h | test S | evaluation CPU-h |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in record["rows"].values():
        lines.append(
            f"| `{row['command']}` | {row['epochs']} x {row['steps'] // row['epochs']} | "
            f"{row['step_ms']:.1f} | {row['training_cpu_hours']:.1f} | "
            f"{row['test_is_samples']} | {row['evaluation_cpu_hours']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("results/reproduction"))
    parser.add_argument("--rows", nargs="*", default=ROWS)
    parser.add_argument("--render", action="store_true", help="only redraw costs.md")
    parser.add_argument("--note", default="", help="what else ran, e.g. ', studies paused'")
    args = parser.parse_args()
    path = args.out / "costs.json"
    if args.render:
        (args.out / "costs.md").write_text(markdown(json.loads(path.read_text())))
        return
    from vgp_bench.run.runtime import code_version

    torch.set_num_threads(1)
    record: dict[str, Any] = {
        "measured": time.strftime("%Y-%m-%d %H:%M"),
        "code_version": code_version(),
        "load_average": [round(v, 1) for v in __import__("os").getloadavg()],
        "note": args.note,
        "rows": {},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.rows:
        print(f"{name} ...", flush=True)
        record["rows"][name] = row_cost(name)
        path.write_text(json.dumps(record, indent=2))
    (args.out / "costs.md").write_text(markdown(record))
    print(markdown(record))


if __name__ == "__main__":
    main()
