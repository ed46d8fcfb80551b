"""The GPU model of the reproduction costs: which operators count as kernels, their FLOPs and
bytes, the (low, high) range it prices them at, a real step traced with the GPU's optimizer
path; and the reproduction costs' tables (costs.md, the README's: vgp_bench/studies/reproduction)
drawn from their JSON as committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vgp_bench.benchmarks import gpu_estimate
from vgp_bench.benchmarks import reproduction_costs as costs
from vgp_bench.benchmarks.gpu_estimate import GpuModel, KernelTrace, estimated_seconds, trace_of
from vgp_bench.studies import reproduction

ROOT = Path(__file__).resolve().parent.parent


def test_a_matrix_product_is_one_kernel_with_its_flops_and_bytes() -> None:
    left = torch.ones(3, 5, dtype=torch.float64)
    right = torch.ones(5, 7, dtype=torch.float64)
    trace = trace_of(lambda: left @ right)
    assert trace.kernels == 1 and trace.host_syncs == 0
    assert trace.flops == [2 * 3 * 5 * 7]
    assert trace.bytes_moved == [8 * (3 * 5 + 5 * 7 + 3 * 7)]


def test_views_and_allocations_launch_nothing_and_item_syncs() -> None:
    values = torch.arange(12.0)

    def work() -> float:
        grid = values.view(3, 4).t()  # views: no kernel
        torch.empty(5)  # an allocation: no kernel
        return (grid * 2).sum().item()  # mul, sum, and the copy to the host

    trace = trace_of(work)
    assert trace.kernels == 3 and trace.host_syncs == 1
    assert trace.flops == [12.0, 1.0, 0.0]  # one a result element; the host gets a number


def test_a_launch_bound_trace_costs_its_host_time_and_a_large_kernel_its_roofline() -> None:
    gpu = GpuModel()
    tiny = KernelTrace()
    for _ in range(1000):
        tiny.add(flops=10.0, bytes_moved=40.0, sync=False)
    low, high = estimated_seconds(tiny, gpu)
    fast, slow = gpu.host_seconds_per_kernel
    assert low == pytest.approx(1000 * max(fast, gpu.min_kernel_seconds))
    assert high == pytest.approx(1000 * (slow + gpu.min_kernel_seconds))
    large = KernelTrace()
    large.add(flops=2 * 4096.0**3, bytes_moved=3 * 4 * 4096.0**2, sync=False)
    compute = 2 * 4096.0**3 / (gpu.peak_flops_per_second * gpu.achieved_fraction)
    assert large.device_seconds(gpu) == pytest.approx(compute)
    assert estimated_seconds(large, gpu) == pytest.approx((compute, slow + compute))


def test_a_training_step_is_traced_with_the_multi_tensor_update_and_restored() -> None:
    from vgp_bench.benchmarks.overhead import make_trainer, run_steps

    torch.manual_seed(0)
    trainer = make_trainer(
        ["model=dlgm1", "inference=vae", "trainer.batch_size=10", "optim=adam"],
        data=["dataset=synthetic", "dataset.n_train=40", "dataset.n_test=10"],
    )
    groups = trainer.parts.optimizer.param_groups
    for group in groups:
        group["foreach"] = False  # torch's update tensor by tensor
    before = [group["foreach"] for group in groups]
    first = gpu_estimate.trace_training_step(trainer)
    second = gpu_estimate.trace_training_step(trainer)
    assert [group["foreach"] for group in groups] == before
    assert first.kernels == second.kernels > 0 and first.flops == second.flops
    per_tensor = trace_of(lambda: run_steps(trainer, 1))  # the update tensor by tensor
    assert first.kernels < per_tensor.kernels


def test_test_work_counts_the_final_and_the_epoch_evaluations() -> None:
    from vgp_bench.run.config.store import compose_config

    table2 = compose_config([*costs.SKETCH_SHAPED, "experiment=table2_draw_vae"])
    assert costs.test_work(table2, 2000) == {"images": 2000, "samples": 500 + 3 * 100}
    table1 = compose_config(["dataset=synthetic", "experiment=table1_dlgm1_vae"])
    assert costs.test_work(table1, 10000) == {"images": 10000, "samples": 5000}


def test_a_partial_measurement_keeps_the_rows_priced_on_the_same_gpu_model() -> None:
    """costs.json as written and read back (its tuples are lists by then) keeps every row for
    the same GPU model, and none for another."""
    from dataclasses import replace

    gpu = GpuModel()
    saved = json.loads(json.dumps({"gpu": costs.gpu_record(gpu), "rows": {"a": {}, "b": {}}}))
    assert costs.kept_rows(saved, gpu) == {"a": {}, "b": {}}
    assert costs.kept_rows(saved, replace(gpu, achieved_fraction=0.4)) == {}
    assert costs.kept_rows({}, gpu) == {}


def test_the_committed_costs_table_is_drawn_from_its_json() -> None:
    folder = ROOT / "results" / "reproduction"
    record = json.loads((folder / "costs.json").read_text())
    assert list(record["rows"]) == [row for row in costs.ROWS if row in record["rows"]]
    assert set(record["rows"]) == set(costs.ROWS), "measure every row: --rows"
    assert reproduction.markdown(record) == (folder / "costs.md").read_text()
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- table:costs -->\n\n", 1)[1].split("\n<!-- /table -->", 1)[0]
    assert table == reproduction.readme_table(record), "scripts/reproduction_costs.py --render"


def test_the_committed_hours_follow_from_the_measured_times() -> None:
    """Each row's hours recompute from its step time, its timed evaluation batch (scaled by
    images and samples) and, on the GPU model, from its traced milliseconds."""
    rows = json.loads((ROOT / "results" / "reproduction" / "costs.json").read_text())["rows"]
    for name, row in rows.items():
        steps_seconds = row["steps"] * row["step_ms"] / 1000
        assert row["steps_cpu_hours"] == pytest.approx(steps_seconds / 3600, rel=1e-2), name
        timed, work = row["evaluation_timed"], row["test_evaluations"]
        timed_samples = min(work["samples"], 100 if "draw" in name else 1000)
        scale = (work["images"] / timed["images_timed"]) * (work["samples"] / timed_samples)
        assert timed["samples"] == timed_samples, name
        assert row["evaluation_cpu_hours"] == pytest.approx(
            timed["seconds"] * scale / 3600, rel=1e-2
        ), name
        validation = row["validation"]
        valid_hours = 0.0
        if validation["images"]:
            valid_timed = validation["timed"]
            valid_hours = (
                row["epochs"] * valid_timed["seconds"] * validation["images"]
                / valid_timed["images_timed"] * validation["samples"] / valid_timed["samples"]
                / 3600
            )  # fmt: skip
        assert row["training_cpu_hours"] == pytest.approx(
            row["steps_cpu_hours"] + valid_hours, rel=1e-2, abs=1e-3
        ), name
        model = row["gpu_model"]
        assert model["step_ms"][0] == pytest.approx(model["step"]["estimated_ms"][0], abs=0.01)
        assert model["training_hours"][0] >= row["steps"] * model["step_ms"][0] / 3.6e6 * 0.99
    assert reproduction.number_cell(0.1048) == "0.10" and reproduction.number_cell(12.34) == "12.3"
