"""The convergence study (results/convergence): DLGM rows trained to early stopping, their
differences over seeds and the questions they answer."""

from __future__ import annotations

import statistics

from vgp_bench.studies import runs
from vgp_bench.studies.answers import Question, Questions, Yardstick, answer
from vgp_bench.studies.cells import (
    MISSING,
    difference_cell,
    estimate_text,
    mean_cell,
    number,
    table,
)
from vgp_bench.studies.curves import last_window_gain, lead_at_stops, realization_gap, repeat_of
from vgp_bench.studies.differences import (
    beyond_three_se,
    paired_cells,
    seed_difference,
    seeds_estimate,
)
from vgp_bench.studies.study import Study

C = "convergence"
# the study's rows in training order: label, run name without its seed (seeds pooled)
CONVERGENCE_ROWS = [
    ("DLGM 2hl + VGP, the paper's form", "dlgm2_vgp_paper"),
    ("DLGM 2hl + the paper form's twin without the GP", "dlgm2_vgp_paper_affine"),
    ("DLGM 2hl + VAE", "dlgm2_vae"),
    ("DLGM 1hl + VAE", "dlgm1_vae"),
    ("DLGM 1hl + VGP, the default", "dlgm1_vgp_default"),
    ("DLGM 1hl + the default's control without the GP", "dlgm1_vgp_linear"),
]
CONVERGENCE_PAIRS = [
    ("dlgm2: VAE - the paper's VGP", "dlgm2_vae", "dlgm2_vgp_paper"),
    (
        "dlgm2: twin - the paper's VGP (what the GP adds)",
        "dlgm2_vgp_paper_affine",
        "dlgm2_vgp_paper",
    ),
    ("dlgm2: VAE - the twin", "dlgm2_vae", "dlgm2_vgp_paper_affine"),
    ("dlgm1: VAE - the default VGP", "dlgm1_vae", "dlgm1_vgp_default"),
    (
        "dlgm1: control - the default VGP (what the GP adds)",
        "dlgm1_vgp_linear",
        "dlgm1_vgp_default",
    ),
]
QUESTIONS = Questions(
    by_model={
        "dlgm1": [
            Question(
                "Does the VGP beat the VAE at convergence?",
                "dlgm1_vae",
                "dlgm1_vgp_default",
                "the default VGP beats the VAE",
                "the VAE beats the default VGP",
            ),
            Question(
                "Is it the GP?",
                "dlgm1_vgp_linear",
                "dlgm1_vgp_default",
                "the GP adds to its control",
                "the control without the GP beats the default VGP",
            ),
        ],
        "dlgm2": [
            Question(
                "Does the VGP beat the VAE at convergence?",
                "dlgm2_vae",
                "dlgm2_vgp_paper",
                "the paper's VGP beats the VAE",
                "the VAE beats the paper's VGP",
            ),
            Question(
                "Is it the GP?",
                "dlgm2_vgp_paper_affine",
                "dlgm2_vgp_paper",
                "the GP improves on its twin",
                "the twin without the GP beats the paper's VGP",
            ),
        ],
    },
    pairs=CONVERGENCE_PAIRS,
    # dlgm1 three seeds (a seed of its rows costs about 2 training hours); dlgm2 one, what the
    # machine affords (its paper form and twin train for half a day of one core or more each)
    seeds={"dlgm1": 3, "dlgm2": 1},
    # dlgm2, answered from one seed, reads it against the spread between dlgm2 seeds the
    # project has measured: the same questions at 100 epochs, seeds 0 and 1 of the 100-epoch
    # study (its VGP the project's default of then, its control the linear warp)
    yardstick={
        "dlgm2": Yardstick(
            "vgp_vs_vae",
            {
                "Does the VGP beat the VAE at convergence?": ("dlgm2_vae", "dlgm2_vgp_best"),
                "Is it the GP?": ("dlgm2_vgp_linear", "dlgm2_vgp_best"),
            },
            "dlgm2 at 100 epochs (results/vgp_vs_vae: the VAE, the VGP default of then and "
            "its control)",
        )
    },
)
# the study script's defaults of the settings the README quotes, for a study with no run yet
CONVERGENCE_DEFAULTS = {
    "trainer.early_stopping.min_delta": "MIN_DELTA",
    "trainer.early_stopping.patience": "PATIENCE",
    "trainer.epochs": "CAP",
}
HEAD_STATISTICS = ("z/warp_share", "z/nonlinear_warp_share", "z/total_correlation")


def lost_note(study: str, name: str) -> str:
    """Where the kept snapshots of a row's lost runs got to, in words ("" if it has none)."""
    lost = runs.lost_runs(study, name)
    if not lost:
        return ""
    epochs = ", ".join(str(runs.load(study, run)["epochs_completed"]) for run in lost)
    names, at = ("an earlier run", "epoch") if len(lost) == 1 else ("earlier runs", "epochs")
    return f"; {names} lost at {at} {epochs} (progress.md)"


def tested_row(study: str, label: str, name: str, seeds: list[int]) -> list[object]:
    """A row's tested runs: epochs, stop, hours, validation, test and q's statistics."""
    names = [f"{name}_s{seed}" for seed in seeds]
    metrics = [runs.load(study, run) for run in names]
    tests = [runs.test_of(study, run) for run in names]
    cells: list[object] = [
        label,
        ", ".join(map(str, seeds)),
        ", ".join(f"{m['epochs_completed']} ({runs.stop_of(m)})" for m in metrics),
        ", ".join(number(runs.training_hours(m), ".1f") for m in metrics),
        ", ".join(str(runs.best_epoch(m)) for m in metrics),
        f"{statistics.fmean(runs.best_valid(study, run) for run in names):.2f}",
    ]
    for key in ("nll", "bound_nll"):
        cells.append(estimate_text(seeds_estimate(study, name, seeds, key)))
    for key in HEAD_STATISTICS:
        cells.append(mean_cell([runs.at_best_epoch(study, run, key) for run in names]))
    cells.append(mean_cell([t.get("pareto_k_above_0_7") for t in tests], 2))
    return cells


def convergence_table(study: str = C) -> str:
    """Each row at its stop: epochs, best validation bound, test IS and bound, how q uses its
    flexibility at the tested epoch; a row still training says where it is."""
    header = [
        "row", "seeds", "epochs (why it ended)", "training hours", "best epoch",
        "best valid bound", "-log p(x) (IS)", "-bound", "warp share", "nonlinear share",
        "total correlation", "k-hat > 0.7",
    ]  # fmt: skip
    rows = []
    for label, name in CONVERGENCE_ROWS:
        seeds = runs.tested_seeds(study, name)
        if seeds:
            rows.append(tested_row(study, label, name, seeds))
            continue
        started = runs.study_seeds(study, name)
        where = runs.where_it_is(runs.load(study, f"{name}_s{started[0]}")) if started else "queued"
        where += lost_note(study, name)
        rows.append([label, MISSING, where, *[MISSING] * (len(header) - 3)])
    return table(header, rows)


def convergence_differences_table(study: str = C) -> str:
    """Differences of the test means over the seeds both rows have, ± the standard error of the
    per-seed differences (one seed: the test images'), and whether they call for more seeds
    (within 3 standard errors of zero); each seed's difference paired over the test images
    besides."""
    rows = []
    for label, a, b in CONVERGENCE_PAIRS:
        seeds = sorted(set(runs.tested_seeds(study, a)) & set(runs.tested_seeds(study, b)))
        if not seeds:
            rows.append([label, *[MISSING] * 4, "waiting for both rows"])
            continue
        is_diff, is_se, _ = seed_difference(a, b, seeds, "nll", study)
        bound_diff, bound_se, _ = seed_difference(a, b, seeds, "bound_nll", study)
        if len(seeds) == 1:
            verdict = "one seed: its SE is the test images' only; more seeds"
        else:
            verdict = "beyond 3 SE" if beyond_three_se(is_diff, is_se) else "more seeds"
        rows.append(
            [
                label,
                ", ".join(map(str, seeds)),
                difference_cell(is_diff, is_se),
                paired_cells(study, a, b, seeds),
                difference_cell(bound_diff, bound_se),
                verdict,
            ]
        )
    header = [
        "", "seeds", "-log p(x) (IS)", "IS, paired over the test images", "-bound",
        "what the IS difference needs",
    ]  # fmt: skip
    return table(header, rows)


def convergence_answer(study: str = C, family: str = "dlgm1", min_seeds: int | None = None) -> str:
    """The answer to each question of a model's rows (answers.answer on this study's)."""
    return answer(study, QUESTIONS, family, min_seeds)


def convergence_setting(key: str) -> str:
    """A trainer setting of the study's runs, as the first committed run's config resolved it
    (before the first run: the study script's default)."""
    configs = sorted(runs.runs_dir(C).glob("*/config.yaml"))
    if configs:
        return str(runs.run_setting(C, configs[0].parent.name, key))
    return runs.script_default("study_convergence.sh", CONVERGENCE_DEFAULTS[key])


def stop_gains(study: str = C) -> str:
    """What the curves were still doing at the stop, over every tested run the early stopping
    ended: the range of its best bound's gain over the last `patience` epochs, and how near the
    last epoch the best came."""
    patience = int(convergence_setting("trainer.early_stopping.patience"))
    tested = (
        runs.load(study, f"{name}_s{seed}")
        for _, name in CONVERGENCE_ROWS
        for seed in runs.tested_seeds(study, name)
    )
    stopped = [m for m in tested if m.get("stop_reason") == "early_stopping"]
    gains = [gain for m in stopped if (gain := last_window_gain(m, patience)) is not None]
    if not gains:
        return "No tested run has been stopped by the early stopping yet."
    to_last = max(m["epochs_completed"] - runs.best_epoch(m) for m in stopped)
    return (
        f"At their stops, the best validation bounds of the {len(gains)} tested runs had gained "
        f"from {min(gains):.3f} to {max(gains):.3f} nats over their last {patience} epochs, and "
        f"each run's best epoch was at most {to_last} epochs before its last: a stop here marks "
        "a curve still rising, only slower than the threshold, not a flat one, and every row is "
        "compared below that same threshold."
    )


TWIN, PAPER = "dlgm2_vgp_paper_affine_s0", "dlgm2_vgp_paper_s0"
STUDY = Study(
    C,
    tables={
        "convergence": convergence_table,
        "convergence-differences": convergence_differences_table,
        "convergence-answer-dlgm1": convergence_answer,
        "convergence-answer-dlgm2": lambda: convergence_answer(family="dlgm2"),
    },
    values={
        "convergence.paper.repeat": lambda: repeat_of(C, PAPER, "dlgm2_vgp_paper_lost2_s0"),
        "convergence.twin.repeat": lambda: repeat_of(C, TWIN, "dlgm2_vgp_paper_affine_lost1_s0"),
        "convergence.twin.lead_at_stops": lambda: lead_at_stops(
            C, TWIN, PAPER, ("the twin", "the paper form")
        ),
        "convergence.twin.realization_gap": lambda: realization_gap(
            C, TWIN, "dlgm2_vgp_paper_affine_lost1_s0", 100
        ),
        "convergence.patience": lambda: convergence_setting("trainer.early_stopping.patience"),
        "convergence.cap": lambda: convergence_setting("trainer.epochs"),
        "convergence.min_delta": lambda: convergence_setting("trainer.early_stopping.min_delta"),
        "convergence.stop_gains": stop_gains,
    },
)
