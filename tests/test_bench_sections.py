"""The bench's overhead, evaluation-time, GP-algebra, VGP-step and optimizer-update sections run
and say what they measured (their speed is the bench's business, not a test's)."""

from __future__ import annotations

from vgp_bench.benchmarks import (
    evaluation_time,
    gp_algebra,
    optimizer_update,
    overhead,
    vgp_step,
)


def test_alternate_takes_the_median_of_alternating_blocks() -> None:
    times = iter([2.0, 1.0, 2.0, 3.0, 2.0, 2.0])  # ours, theirs, ours, theirs, ...
    result = overhead.alternate(lambda: next(times), lambda: next(times), rounds=3)
    assert result["ratio"] == 1.0 and result["ratio_low"] == 0.5 and result["ratio_high"] == 1.5
    assert result["ours_ms"] == 2000.0 and result["theirs_ms"] == 2000.0


def test_runner_and_plain_loop_both_train_in_the_overhead_section() -> None:
    measured = overhead.runner_vs_plain(batch_size=20, rounds=1, block=2)
    assert measured["ours_ms"] > 0 and measured["theirs_ms"] > 0 and measured["rounds"] == 1


def test_an_evaluation_is_timed_on_one_eval_batch() -> None:
    timed = evaluation_time.evaluation_seconds(
        ["model=dlgm1", "inference=vae", "eval.batch_size=4", "eval.chunk_size=2"], samples=4
    )
    assert timed["images_timed"] == 4 and timed["samples"] == 4 and timed["seconds"] > 0


def test_the_bench_script_runs_as_a_command() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "bench.py"
    result = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "--render" in result.stdout


def test_the_gp_algebra_section_times_the_fused_and_the_autograd_conditional() -> None:
    result = gp_algebra.bench_gp_algebra(quick=True, sizes=(60, 5, 3), queries_counted=(4,))
    row = result["rows"]["4 queries"]
    assert row["fused_ms"] > 0 and row["autograd_ms"] > 0
    assert [target["required"] for target in result["targets"]] == [gp_algebra.SPEEDUP_TARGET]


def test_the_vgp_step_section_interleaves_its_rows_and_gives_ratios_to_the_vae() -> None:
    small = ["model=dlgm1", "model.latent_dims=[4]", "model.hidden_dims=[[16]]"]
    rows = {
        "vae": [*small, "inference=vae", "trainer.batch_size=4"],
        "vgp": [*small, "inference=vgp", "inference.variational_data_size=8"],
    }
    rows["vgp"].append("trainer.batch_size=4")
    data = ["dataset=synthetic", "dataset.n_train=40", "dataset.n_test=8"]
    beside = {"algebra": gp_algebra.conditional_step(4, fused=True, sizes=(30, 3, 2))}
    result = vgp_step.interleaved(rows, rounds=2, block=1, data=data, beside=beside)
    assert result["vae"]["ratio_to_vae"] == 1.0 and result["vgp"]["step_ms"] > 0
    assert result["vgp"]["overrides"] == rows["vgp"] and result["algebra"]["step_ms"] > 0


def test_the_study_rows_compose_the_vae_protocol_with_the_vgp_head() -> None:
    from vgp_bench.run.config.store import compose_config

    rows = vgp_step.GROUPS["burda_dlgm1 (study protocol, batch 20)"]
    configs = {name: compose_config(overrides) for name, overrides in rows.items()}
    assert {name: cfg.inference.name for name, cfg in configs.items()} == {
        "vae": "vae",
        "vgp": "vgp",
        "vgp control": "vgp",
    }
    assert configs["vgp"].inference.warp == "gp"
    assert configs["vgp control"].inference.warp == "linear"
    assert {name: cfg.experiment_name for name, cfg in configs.items()} == {
        "vae": "burda_dlgm1_vae",
        "vgp": "burda_dlgm1_vgp",
        "vgp control": "burda_dlgm1_vgp_control",
    }  # the study's own experiments
    for cfg in configs.values():  # the protocol: batch 20, dynamic binarization
        assert cfg.trainer.batch_size == 20 and cfg.dataset.binarization == "dynamic"


def test_the_optimizer_section_times_each_update_on_the_rows_parameters() -> None:
    small = ["model=dlgm1", "model.latent_dims=[4]", "model.hidden_dims=[[16]]", "inference=vae"]
    data = ["dataset=synthetic", "dataset.n_train=40", "dataset.n_test=8"]
    makers = {
        "ours": lambda p: optimizer_update.RMSprop(p, foreach=False),
        "torch's": lambda p: optimizer_update.torch.optim.RMSprop(p, foreach=False),
    }
    row = optimizer_update.compare(small, makers, quick=True, data=data)
    assert row["tensors"] > 0 and row["entries"] > row["tensors"]
    assert set(row["ms_per_update"]) == {"ours", "torch's"}
    assert all(value > 0 for value in row["ms_per_update"].values())
