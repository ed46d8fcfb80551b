"""The convergence study's tables and answers (vgp_bench/studies/convergence.py): rows pooled over
their tested seeds, lost runs, the differences and whether they call for more seeds, the
answers in words (from three seeds, or one against dlgm1's spread), and the stops."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.study_folders import (
    evaluation_record,
    forget_records,
    run_with_test,
    write_run,
)
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.answers import Yardstick, answer, answer_rows, seed_spread
from vgp_bench.studies.cells import difference_cell, signed
from vgp_bench.studies.convergence import (
    QUESTIONS,
    convergence_answer,
    convergence_differences_table,
    convergence_table,
    stop_gains,
)
from vgp_bench.studies.curves import lead_at_stops, realization_gap
from vgp_bench.studies.differences import difference as row_difference
from vgp_bench.studies.differences import seed_difference, seeds_for_three_se
from vgp_bench.studies.spread import chi_square_quantile, deviation_interval


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    """Each test reads the run records afresh (the package reads each once per process)."""
    forget_records()


def test_the_convergence_tables_pool_tested_rows_and_say_where_the_others_are() -> None:
    """Run on the 100-epoch study's runs: a tested row gets its epochs, test numbers and head
    statistics at the tested epoch, a missing row is queued, and a pair with a common seed
    gets its difference and whether it calls for more seeds."""
    lines = convergence_table("vgp_vs_vae").splitlines()
    paper = next(line for line in lines if line.startswith("| DLGM 2hl + VGP, the paper's form"))
    test = study_runs.test_of("vgp_vs_vae", "dlgm2_vgp_paper_s0")
    metrics = study_runs.load("vgp_vs_vae", "dlgm2_vgp_paper_s0")
    cells = [cell.strip() for cell in paper.strip("|").split("|")]
    assert cells[1] == "0" and cells[2] == f"{metrics['epochs_completed']} (cap)"
    assert cells[3] == f"{metrics['wall_time_s'] / 3600:.1f}"  # the training epochs' time
    assert cells[6] == f"{test['nll']:.2f} ± {test['nll_stderr']:.2f}"
    tested_at = next(e for e in metrics["history"] if e["epoch"] == study_runs.best_epoch(metrics))
    assert cells[8] == f"{tested_at['z/warp_share']:.3f}"
    assert cells[11] == f"{test['pareto_k_above_0_7']:.2f}"
    vae = next(line for line in lines if line.startswith("| DLGM 2hl + VAE"))
    assert "0, 1" in vae and vae.count("—") == 3  # no head diagnostics for the VAE
    assert any(
        line.startswith("| DLGM 2hl + the paper form's twin") and "queued" in line for line in lines
    )
    differences = convergence_differences_table("vgp_vs_vae")
    vae_test = study_runs.test_of("vgp_vs_vae", "dlgm2_vae_s0")
    se = math.hypot(vae_test["nll_stderr"], test["nll_stderr"])
    cell = difference_cell(vae_test["nll"] - test["nll"], se)
    assert f"| dlgm2: VAE - the paper's VGP | 0 | {cell} |" in differences


def test_a_convergence_row_whose_runs_were_lost_says_where_they_got(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A row with no live run but snapshots of lost ones is queued and names the epochs they
    reached; the lost snapshots are not seeds of the row."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "convergence-lost" / "runs"
    for number, epochs in ((1, 7), (2, 4)):
        curve = [{"epoch": e, "valid_bound": -110.0 + e} for e in range(1, epochs + 1)]
        write_run(runs / f"dlgm2_vgp_paper_lost{number}_s0", "running", curve, 10, None)
    assert study_runs.study_seeds("convergence-lost", "dlgm2_vgp_paper") == []
    lines = convergence_table("convergence-lost").splitlines()
    paper = next(line for line in lines if line.startswith("| DLGM 2hl + VGP, the paper's form"))
    where = "queued; earlier runs lost at epochs 7, 4 (progress.md)"
    assert [cell.strip() for cell in paper.strip("|").split("|")][2] == where


def test_the_convergence_answer_waits_for_three_seeds_then_reads_the_differences(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The dlgm1 answer waits until every dlgm1 row has three tested seeds; then a difference
    beyond 3 standard errors over seeds is a yes in its direction, one within them is 'not
    measurably' with the range 3 SE leave open and the seeds a row would need at the measured
    difference and spread (SE falling as 1/sqrt(seeds)), and one more seed is costed from the
    rows' training hours."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "convergence" / "runs"
    nll = {  # the VAE clearly behind; the control and the default VGP level
        "dlgm1_vae": [91.0, 91.1, 91.2],
        "dlgm1_vgp_default": [90.0, 90.3, 89.9],
        "dlgm1_vgp_linear": [90.1, 90.0, 90.2],
    }
    hours = {"dlgm1_vae": 0.25, "dlgm1_vgp_default": 1.0, "dlgm1_vgp_linear": 0.5}

    def add(name: str, seed: int) -> None:
        run_with_test(runs / f"{name}_s{seed}", nll[name][seed], hours[name])

    for name in nll:
        for seed in (0, 1):
            add(name, seed)
    add("dlgm1_vae", 2)
    waiting = convergence_answer()
    assert waiting.startswith("Waiting for 3 seeds") and waiting.endswith("so far: 0, 1).")
    add("dlgm1_vgp_default", 2)
    add("dlgm1_vgp_linear", 2)
    lines = convergence_answer().splitlines()
    assert len(lines) == 3
    diff, se, _ = seed_difference("dlgm1_vae", "dlgm1_vgp_default", [0, 1, 2], "nll", "convergence")
    assert diff == pytest.approx(1.0333333) and diff > 3 * se
    assert se == pytest.approx(statistics.stdev([1.0, 0.8, 1.3]) / math.sqrt(3))
    assert "Yes: the default VGP beats the VAE, beyond 3 SE" in lines[0]
    assert difference_cell(diff, se) in lines[0] and "(per seed +1.00, +0.80, +1.30)" in lines[0]
    diff, se, _ = seed_difference(
        "dlgm1_vgp_linear", "dlgm1_vgp_default", [0, 1, 2], "nll", "convergence"
    )
    assert "Not measurably" in lines[1] and abs(diff) < 3 * se
    low, high = signed(diff - 3 * se), signed(diff + 3 * se)
    assert f"anything from {low} to {high} nats" in lines[1]
    assert f"about {3 * (3 * se / diff) ** 2:.0f} seeds a row" in lines[1]
    assert "One more seed of the 3 dlgm1 rows costs 1.8 training hours" in lines[2]
    assert seeds_for_three_se(0.0, 0.1, 3) == math.inf


def test_the_dlgm2_yardstick_is_the_spread_between_dlgm2_seeds_of_the_100_epoch_study() -> None:
    """The committed dlgm2 answer reads its one seed against the same questions' differences
    between dlgm2 seeds 0 and 1 of results/vgp_vs_vae, whose runs are committed."""
    yardstick = QUESTIONS.yardstick["dlgm2"]
    assert yardstick.study == "vgp_vs_vae" and set(yardstick.rows) == {
        q.asked for q in QUESTIONS.by_model["dlgm2"]
    }
    for asked, (a, b) in yardstick.rows.items():
        assert a.startswith("dlgm2_") and b.startswith("dlgm2_")
        deviation, seeds = seed_spread(yardstick, asked)
        per_seed = row_difference(a, b, seeds, "nll", "vgp_vs_vae")[2]
        assert seeds == [0, 1] and deviation == pytest.approx(statistics.stdev(per_seed))


def test_the_dlgm2_answer_reads_one_seed_against_a_yardsticks_spread_between_seeds(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """dlgm2 is answered from the seed all its rows share: each difference (with the test
    images' noise paired over them) is set against 3 standard errors from the yardstick's
    standard deviation between seeds of the same question (here dlgm1's rows), whose 95%
    interval is given; a yes holds at the top of that interval or says how much wider a spread
    would undo it, one within 3 is unsettled, and with no spread the answer says it cannot be
    read yet."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    history = [{"epoch": 1, "valid_bound": -90.0}]
    dlgm1 = {
        "dlgm1_vae": [91.0, 91.1, 91.2],
        "dlgm1_vgp_default": [90.0, 90.3, 89.9],  # VAE - default: +1.0, +0.8, +1.3
        "dlgm1_vgp_linear": [90.1, 90.0, 90.2],  # control - default: +0.1, -0.3, +0.3
    }

    def add(study: str, name: str, seed: int, nll: float | None) -> None:
        folder = tmp_path / study / "runs" / f"{name}_s{seed}"
        if nll is None:  # training: a folder, no test
            write_run(folder, "running", history, 10, None)
            return
        run_with_test(folder, nll, 2.0, "test_per_example_k5000.h5")

    files = ["test_per_example_k5000.h5"] * 2

    def pair(first: str, second: str, difference: float, se: float) -> dict[str, Any]:
        return {"seed": 1, "first": first, "second": second, "files": files,
                "nll": {"difference": difference, "paired_se": se}}  # fmt: skip

    # dlgm2's rows share seed 1; the VAE also has a seed 0, which the answer must not read
    cases = {
        "convergence": ((0, 1, 2), 95.0, 95.4),  # a yes inside dlgm1's interval; a no
        "robust": ((0, 1, 2), 93.0, 92.0),  # a yes beyond the interval; the twin ahead
        "one-dlgm1-seed": ((0,), 95.0, 95.4),
        "unpaired-twin": ((0, 1, 2), 95.0, 95.4),  # the paper form's per-example file lost
    }
    for study, (dlgm1_seeds, paper, twin) in cases.items():
        for name, values in dlgm1.items():
            for seed in dlgm1_seeds:
                add(study, name, seed, values[seed])
        add(study, "dlgm2_vae", 0, 80.0)
        add(study, "dlgm2_vae", 1, 99.5)
        add(study, "dlgm2_vgp_paper", 1, paper)
        paired = [  # the twin's pair stored the other way round: its sign turns
            pair("dlgm2_vae", "dlgm2_vgp_paper", 99.5 - paper, 0.05),
            pair("dlgm2_vgp_paper", "dlgm2_vgp_paper_affine", paper - twin, 0.03),
        ][: 1 if study == "unpaired-twin" else 2]
        (tmp_path / study / "paired_differences.json").write_text(json.dumps(paired))

    def dlgm2_answer(study: str) -> str:
        rows = {
            "Does the VGP beat the VAE at convergence?": ("dlgm1_vae", "dlgm1_vgp_default"),
            "Is it the GP?": ("dlgm1_vgp_linear", "dlgm1_vgp_default"),
        }
        yardstick = Yardstick(study, rows, "dlgm1's rows")
        questions = dataclasses.replace(QUESTIONS, yardstick={"dlgm2": yardstick})
        return answer(study, questions, "dlgm2")

    add("convergence", "dlgm2_vgp_paper_affine", 1, None)
    assert dlgm2_answer("convergence") == (
        "Waiting for 1 seed tested in every dlgm2 row (tested in all of them so far: none)."
    )
    for study, (_, _, twin) in cases.items():
        add(study, "dlgm2_vgp_paper_affine", 1, twin)
    study_runs.load.cache_clear()  # the twin's record changed under the module's cache
    low, high = deviation_interval(3)
    assert (low, high) == pytest.approx(  # two degrees of freedom: chi-square is exponential
        (math.sqrt(2 / (-2 * math.log(0.025))), math.sqrt(2 / (-2 * math.log(0.975))))
    )
    assert chi_square_quantile(0.975, 1) == pytest.approx(5.0239, abs=1e-4)
    assert chi_square_quantile(0.05, 10) == pytest.approx(3.9403, abs=1e-4)

    lines = dlgm2_answer("convergence").splitlines()
    assert len(lines) == 3
    spread = statistics.stdev([1.0, 0.8, 1.3])
    gp_rows = Yardstick(
        "convergence", {"Is it the GP?": ("dlgm1_vgp_linear", "dlgm1_vgp_default")}, ""
    )
    assert seed_spread(gp_rows, "Is it the GP?")[0] == pytest.approx(
        statistics.stdev([0.1, -0.3, 0.3])
    )
    assert lines[0].startswith(
        "- **Does the VGP beat the VAE at convergence?** Yes if seeds spread as in dlgm1's rows: "
        "the paper's VGP beats the VAE. VAE - the paper's VGP, test -log p(x) (IS), "
        "seed 1: +4.50 (paired over the test images, their noise only: seed 1: +4.50 ± 0.050)."
    )
    assert (
        "the same question's difference in dlgm1's rows: +1.00, +0.80, +1.30 over seeds 0, 1, 2, "
        f"a standard deviation of {spread:.2f} nats (95% interval "
        f"{low * spread:.2f} to {high * spread:.2f}, from 3 seeds); by it, this difference's "
        f"standard error is {spread:.2f} nats and the difference {4.5 / spread:.1f} of them."
    ) in lines[0]
    assert 4.5 / spread / 3 < high
    assert f"Seeds spreading {4.5 / spread / 3:.1f} times as widely" in lines[0]
    spread = statistics.stdev([0.1, -0.3, 0.3])
    assert lines[1].startswith("- **Is it the GP?** Unsettled with 1 seed: twin - ")
    assert "seed 1: +0.40 (paired over the test images, their noise only: seed 1: +0.40" in lines[1]
    assert (
        f"and the difference {0.4 / spread:.1f} of them, within 3 of zero: 3 leave open "
        f"anything from {signed(0.4 - 3 * spread)} to {signed(0.4 + 3 * spread)}"
    ) in lines[1]
    assert "One more seed of the 3 dlgm2 rows costs 6.0 training hours" in lines[2]

    robust = dlgm2_answer("robust").splitlines()
    assert 6.5 / statistics.stdev([1.0, 0.8, 1.3]) / 3 > high
    assert robust[0].startswith(
        "- **Does the VGP beat the VAE at convergence?** Yes: the paper's VGP beats the VAE, "
        "beyond 3 standard errors even at the top of that spread's interval."
    )
    assert robust[1].startswith(
        "- **Is it the GP?** Yes if seeds spread as in dlgm1's rows: the twin without the GP "
        "beats the paper's VGP."
    )
    assert (
        "seed 1: -1.00 (paired over the test images, their noise only: seed 1: -1.00" in (robust[1])
    )
    unanswered = dlgm2_answer("one-dlgm1-seed").splitlines()
    assert all(
        "Not answerable yet" in line
        and line.endswith(
            "not measured here, and the same difference in dlgm1's rows has fewer than two seeds."
        )
        for line in unanswered[:2]
    )
    unpaired = dlgm2_answer("unpaired-twin").splitlines()
    paired_vae = "seed 1: +4.50 (paired over the test images, their noise only: seed 1: +4.50"
    assert paired_vae in unpaired[0]
    assert (
        "seed 1: +0.40 (not paired over the test images: no stored pair of per-example files)."
        in unpaired[1]
    )
    with pytest.raises(ValueError, match="asks no question"):
        answer_rows(QUESTIONS, "dlgm2", "Is it the kernel?")


def test_the_lead_at_the_stops_splits_into_equal_epochs_and_the_epochs_only_one_trained(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """lead_at_stops compares the best bounds so far at the last epoch of the run that stopped
    first (the other's last epoch before it where its history has a gap), and at the other's
    stop; the parts add up as shown; runs not both stopped by the early stopping, or stopped in
    the other order, are refused. realization_gap gives the range of two realizations' gaps in
    best bound after an epoch."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "study" / "runs"

    def add(name: str, values: dict[int, float], stop_reason: str | None) -> None:
        history = [{"epoch": epoch, "valid_bound": v} for epoch, v in values.items()]
        write_run(runs / name, "finished" if stop_reason else "running", history, 10, None)
        record = json.loads((runs / name / "metrics.json").read_text())
        (runs / name / "metrics.json").write_text(
            json.dumps({**record, "stop_reason": stop_reason})
        )

    # best so far: first -100, -99.5, -99.5 (stops at 3); second -100.5, -99, (no 3), -98.255
    add("first_s0", {1: -100.0, 2: -99.5, 3: -99.75}, "early_stopping")
    add("second_s0", {1: -100.5, 2: -99.0, 4: -98.255}, "early_stopping")
    add("running_s0", {1: -100.0, 2: -98.0, 3: -97.0, 4: -96.0}, None)
    names = ("the first", "the second")
    assert lead_at_stops("study", "first_s0", "second_s0", names) == (
        "at the first's last epoch, 3, the second's best validation bound was -99.00 against "
        "the first's -99.50 (+0.50 nats); the second trained 1 epoch more, to -98.25 at its "
        "stop (+1.25 against the first's best): of the second's best minus the first's at the "
        "stops, +0.50 nats were there at equal epochs and +0.75 came with the epochs only the "
        "second trained"
    )
    with pytest.raises(ValueError, match="did not stop after"):
        lead_at_stops("study", "second_s0", "first_s0", names)
    with pytest.raises(ValueError, match="not both stopped by early stopping"):
        lead_at_stops("study", "first_s0", "running_s0", names)
    # gaps of the best so far after epoch 1: epoch 2 1.5, epoch 3 2.5 (epoch 4 not in first)
    assert realization_gap("study", "first_s0", "running_s0", 1) == (
        "1.50 to 2.50 nats over epochs 2 to 3"
    )
    with pytest.raises(ValueError, match="share no epoch after 3"):
        realization_gap("study", "first_s0", "running_s0", 3)


def test_the_stop_sentence_says_how_much_each_stopped_curve_still_gained(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Over the tested runs the early stopping ended (not a run at its cap, not one still
    training), the generated sentence gives the range of the best bound's gain over the last
    `patience` epochs (the study script's default, 50) and how far before the last epoch the
    best came."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    study_runs.load.cache_clear()
    runs = tmp_path / "conv-s" / "runs"
    assert stop_gains("conv-s").startswith("No tested run has been stopped")

    def curve_run(run: str, status: str, bounds: list[float], stop: str | None) -> None:
        history = [{"epoch": e, "valid_bound": b} for e, b in enumerate(bounds, start=1)]
        test = evaluation_record(90.0, (0.25, 0.3), 5.0, 10000, 5000)
        write_run(runs / run, status, history, 10, test if status == "finished" else None)
        record = json.loads((runs / run / "metrics.json").read_text())
        (runs / run / "metrics.json").write_text(json.dumps({**record, "stop_reason": stop}))
        study_runs.load.cache_clear()

    # best -100.0 at epoch 10, then 0.3 more at epoch 57 of 60: 0.3 over the last 50
    vae = [-110.0 + e for e in range(1, 11)] + [-100.0] * 50
    vae[56] = -99.7
    curve_run("dlgm1_vae_s0", "finished", vae, "early_stopping")
    # best gained 0.45 over the last 50, at the very last epoch
    vgp = [-100.0] * 10 + [-100.0 + 0.009 * e for e in range(1, 51)]
    curve_run("dlgm1_vgp_default_s0", "finished", vgp, "early_stopping")
    curve_run("dlgm1_vgp_linear_s0", "finished", [-100.0 + e for e in range(60)], "epochs")
    curve_run("dlgm2_vae_s0", "running", [-100.0 + e for e in range(60)], None)
    sentence = stop_gains("conv-s")
    assert "of the 2 tested runs had gained from 0.300 to 0.450 nats" in sentence
    assert "over their last 50 epochs" in sentence and "at most 3 epochs before" in sentence
