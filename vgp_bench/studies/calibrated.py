"""The calibrated study (results/calibrated): the paper's DLGM 1hl claim, the VGP 1.97 nats
better than the VAE, under the protocol that reproduces the VAE's published number
(results/calibration); the VGP default, its no-GP control, a second VAE seed and the 2-layer VAE,
each trained the protocol's 3280 epochs and tested once at the end."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from vgp_bench.analysis.report.paper import PAPER
from vgp_bench.schedules import stage_of_epoch
from vgp_bench.studies import runs
from vgp_bench.studies.cells import (
    MISSING,
    difference_cell,
    number,
    plural,
    share_cell,
    signed,
    table,
)
from vgp_bench.studies.differences import paired_run_values
from vgp_bench.studies.q_reading import (
    WARP_KEYS,
    close_to_mean_field,
    mean_field_words,
    reliability,
    statistics_text,
)
from vgp_bench.studies.study import Study

CALIBRATED = "calibrated"
STAGES = 8  # the protocol's stages of 3^i epochs
PAPER_VAE = float(PAPER["table1"][("dlgm1", "vae")]["value"])
PAPER_VGP = float(PAPER["table1"][("dlgm1", "vgp")]["value"])
PAPER_DLGM2_VGP = float(PAPER["table1"][("dlgm2", "vgp")]["value"])
# Burda, Grosse & Salakhutdinov (2016), Table 1: the VAE with two stochastic layers (100 and 50
# units, deterministic tanh layers 200-200 and 100-100, wider than the paper's 100), k = 1, the
# importance-sampled test -log p(x) with k = 5000
BURDA_DLGM2_VAE = 85.33


@dataclass(frozen=True)
class Row:
    """A row of the study: its label and its runs, each as (study, run name)."""

    label: str
    runs: Sequence[tuple[str, str]]
    short: str  # the row in the answers' words


VAE = Row(
    "DLGM 1hl + VAE",
    [("calibration", "burda_dlgm1_vae_s0"), (CALIBRATED, "burda_dlgm1_vae_s1")],
    "the VAE",
)
VGP = Row("DLGM 1hl + VGP, the default", [(CALIBRATED, "burda_dlgm1_vgp_s0")], "the VGP")
CONTROL = Row(
    "DLGM 1hl + the VGP's control without the GP",
    [(CALIBRATED, "burda_dlgm1_vgp_control_s0")],
    "the control",
)
DLGM2_VAE = Row("DLGM 2hl + VAE", [(CALIBRATED, "burda_dlgm2_vae_s0")], "the 2-layer VAE")
ROWS = [VAE, VGP, CONTROL, DLGM2_VAE]
# the experiment each row runs, as results/reproduction/costs.json prices it
EXPERIMENTS = [
    (VAE, "burda_dlgm1_vae"),
    (VGP, "burda_dlgm1_vgp"),
    (CONTROL, "burda_dlgm1_vgp_control"),
    (DLGM2_VAE, "burda_dlgm2_vae"),
]
HEAD_STATISTICS = ("z/warp_share", "z/nonlinear_warp_share", "z/total_correlation")


def final_test(study: str, run: str) -> dict | None:
    """A run's test of its final parameters at the end of the protocol, else None."""
    return runs.first_test(study, run)


def where(study: str, run: str) -> str:
    """A run's state: not started, its epoch and stage of the protocol, or finished."""
    if not runs.has_run(study, run):
        return "not started"
    metrics = runs.load(study, run)
    planned = int(runs.run_setting(study, run, "trainer.epochs"))
    epochs = int(metrics["epochs_completed"])
    if metrics.get("status") == "finished":
        return f"{epochs} of {planned}, finished"
    stage = stage_of_epoch(max(epochs - 1, 0), STAGES) + 1
    return f"{epochs} of {planned} (stage {stage} of {STAGES}), {metrics.get('status')}"


def run_row(label: str, study: str, run: str) -> list[object]:
    """A run's cells: where it stands, its validation bound, its test and q's statistics."""
    state = where(study, run)
    if state == "not started":
        return [label, f"`{run}`", state, *[MISSING] * 6]
    metrics = runs.load(study, run)
    history = metrics["history"]
    last_valid = number(history[-1]["valid_bound"], ".2f") if history else MISSING
    test = final_test(study, run)
    tested = [MISSING] * 3
    if test is not None:
        tested = [
            f"{test['nll']:.2f} ± {test['nll_stderr']:.2f}",
            f"{test['bound_nll']:.2f} ± {test['bound_nll_stderr']:.2f}",
            share_cell(test.get("pareto_k_above_0_7")),
        ]
    statistics_cells = [number(runs.last(study, run, key), ".3f") for key in HEAD_STATISTICS]
    hours = runs.training_hours(metrics)
    return [
        label, f"`{run}`", state, last_valid, *tested,
        " / ".join(statistics_cells), number(hours, ".1f"),
    ]  # fmt: skip


def calibrated_table() -> str:
    """Every run of the study: where it stands, its test and the VGP's statistics."""
    rows = [run_row(row.label, study, run) for row in ROWS for study, run in row.runs]
    header = [
        "row", "run", "epochs", "last valid bound", "-log p(x) (IS)", "-bound", "k-hat > 0.7",
        "warp / nonlinear share / total correlation", "training hours",
    ]  # fmt: skip
    return table(header, rows)


def tested(row: Row) -> list[tuple[str, str, dict]]:
    """A row's runs tested at the end of the protocol, with their tests."""
    found = [(study, run, final_test(study, run)) for study, run in row.runs]
    return [(study, run, test) for study, run, test in found if test is not None]


def spread_between_seeds(tests: list[tuple[str, str, dict]], key: str) -> float | None:
    """The standard deviation of a row's test `key` (IS, or -bound) between its tested seeds
    (`tested(row)`); None with fewer than two."""
    values = [test[key] for *_, test in tests]
    return statistics.stdev(values) if len(values) >= 2 else None


def mean_of(tests: list[tuple[str, str, dict]], key: str) -> float:
    """The mean of `key` over a row's tested runs."""
    return statistics.fmean(test[key] for *_, test in tests)


def seeds_words(diff: float, counts: tuple[int, int], keys: tuple[str, str]) -> str:
    """A difference of rows with `counts` tested seeds, ± its standard error if seeds spread as
    the VAE's do under this protocol in the keys compared (each row's own key)."""
    vae_tests = tested(VAE)  # read once: every key's spread and the degrees of freedom
    spreads = [spread_between_seeds(vae_tests, key) for key in keys]
    if None in spreads:
        return "no second VAE seed tested: the spread between seeds is not measured yet"
    variance = sum(spread**2 / count for spread, count in zip(spreads, counts, strict=True))
    shown = ", ".join(f"{spread:.2f}" for spread in dict.fromkeys(spreads))
    freedom = len(vae_tests) - 1
    caution = (
        "one degree of freedom: the seeds' true spread may be several times this"
        if freedom == 1
        else f"{freedom} degrees of freedom"
    )
    return (
        f"{difference_cell(diff, math.sqrt(variance))} if seeds spread as the VAE's do under "
        f"this protocol (standard deviation {shown} nats over its {freedom + 1} seeds, "
        f"{caution})"
    )


def difference_words(a: Row, b: Row, question: str, paper: float | None) -> str:
    """One question's answer: a's mean IS minus b's, and the same of -bound, each with its
    standard error if the rows' seeds spread as the VAE's do; with the paper's lead, a's IS
    minus b's -bound too (the paper's comparison if its VGP number is a bound)."""
    first, second = tested(a), tested(b)
    if not first or not second:
        waiting = [run for row in (a, b) for study, run in row.runs if not final_test(study, run)]
        return f"- **{question}** Waiting for {', '.join(f'`{run}`' for run in waiting)}."
    counts = (len(first), len(second))

    def part(key_a: str, key_b: str) -> str:
        diff = mean_of(first, key_a) - mean_of(second, key_b)
        return f"{signed(diff)} nats: {seeds_words(diff, counts, (key_a, key_b))}"

    text = f"- **{question}** IS {part('nll', 'nll')}"
    if paper is not None:
        text += f"; the paper: {signed(paper)}"
    text += f". The -bound {part('bound_nll', 'bound_nll')}."
    if paper is not None:
        text += (
            f" {a.short[0].upper()}{a.short[1:]}'s IS minus {b.short}'s -bound, the paper's "
            'comparison if its VGP number is a bound (its column is "≤", and it does not say '
            f"which estimator gave it): {part('nll', 'bound_nll')}."
        )
    return text + paired_words(a, b)


def paired_words(a: Row, b: Row) -> str:
    """The differences of a's and b's tested runs paired over the test images, of IS and of
    -bound, where both per-example files were kept (paired_differences.json), in a sentence;
    empty if none."""
    found = []
    for first_study, first, first_test in tested(a):
        for second_study, second, second_test in tested(b):
            if first_study != CALIBRATED or second_study != CALIBRATED:
                continue  # the calibration study's VAE kept no per-example file
            for key, name in (("nll", "IS"), ("bound_nll", "-bound")):
                paired = paired_run_values(
                    CALIBRATED, (first, second), (first_test, second_test), key
                )
                if paired is not None:
                    cell = difference_cell(*paired, digits=3)
                    found.append(f"{name} `{first}` - `{second}` {cell}")
    if not found:
        return ""
    return (
        f" Paired over the test images: {'; '.join(found)} (the test images' noise alone, "
        "for these seeds)."
    )


def head_statistics_at_end(study: str, run: str) -> tuple[str, list[float]] | None:
    """A run's WARP_KEYS at its last recorded epoch and where that epoch is, in words; None
    before the run records them."""
    if not runs.has_run(study, run):
        return None
    values = [runs.last(study, run, key) for key in WARP_KEYS]
    if any(value is None for value in values):
        return None
    metrics = runs.load(study, run)
    examples = runs.run_setting(study, run, "trainer.diagnostics_examples")
    planned = int(runs.run_setting(study, run, "trainer.epochs"))
    epoch = metrics["history"][-1]["epoch"]
    when = (
        f"its last epoch ({epoch})"
        if metrics.get("status") == "finished"
        else f"epoch {epoch} of {planned}, still training"
    )
    return f"{when}, on {examples} validation images", [float(v) for v in values]


def flexibility_words() -> str:
    """Does the VGP use its flexibility: its head statistics at its last recorded epoch read
    as mean-field or not (q_reading), its control's beside them (docs/design.md, 5.2)."""
    question = "Does the VGP use its flexibility here?"
    (study, run), (control_study, control) = VGP.runs[0], CONTROL.runs[0]
    found = head_statistics_at_end(study, run)
    if found is None:
        return f"- **{question}** Waiting for `{run}`'s head statistics."
    when, values = found
    text = f"- **{question}** The VGP's q at {when}: {statistics_text(*values)}."
    evidence = "the control without the GP asks that directly: control - VGP above"
    text += mean_field_words(close_to_mean_field(*values), evidence)
    beside = head_statistics_at_end(control_study, control)
    if beside is not None:
        control_when, control_values = beside
        text += (
            f" The control's q, an affine warp of xi and so a mean-field Gaussian whatever its "
            f"warp share, at {control_when}: {statistics_text(*control_values)}."
        )
    return text


def khat_words() -> str:
    """The share of test images whose importance weights have a k-hat above 0.7, per tested
    run, and what it says of the IS estimates (q_reading.reliability)."""
    question = "How reliable are the IS estimates?"
    tested_runs = [(run, test) for row in ROWS for _, run, test in tested(row)]
    waiting = [run for row in ROWS[:3] for study, run in row.runs if final_test(study, run) is None]
    shares = "; ".join(
        f"`{run}` {share_cell(test.get('pareto_k_above_0_7'))}" for run, test in tested_runs
    )
    samples = "/".join(sorted({str(test.get("is_samples")) for _, test in tested_runs}))
    text = (
        f"- **{question}** Test images whose importance weights (k = {samples}) have a PSIS "
        f"k-hat above 0.7: {shares}."
    )
    warning = reliability(test for _, test in tested_runs)
    text += f" {warning}" if warning else " At most half of them in every tested run."
    if waiting:
        text += f" Waiting for {', '.join(f'`{run}`' for run in waiting)}."
    return text


def cost_words() -> str:
    """Each row's measured cost on one thread (results/reproduction/costs.json, with its
    conditions): its step, the training and test CPU-hours, the step against the VAE's."""
    question = "What does each row cost?"
    measured = (runs.read_json("reproduction", "costs.json") or {}).get("rows", {})
    priced = {name: measured[name] for _, name in EXPERIMENTS if name in measured}
    missing = [name for _, name in EXPERIMENTS if name not in priced]
    if missing:
        return f"- **{question}** Not measured yet: {', '.join(missing)}."
    vae_step = priced[EXPERIMENTS[0][1]]["step_ms"]
    parts = []
    for row, name in EXPERIMENTS:
        cost = priced[name]
        ratio = "" if row is VAE else f", {cost['step_ms'] / vae_step:.1f}x the VAE's"
        parts.append(
            f"{row.label} (`{name}`) {cost['step_ms']:.1f} ms a step{ratio}, "
            f"{cost['training_cpu_hours']:.1f} CPU-hours for its {cost['epochs']} epochs and "
            f"{cost['evaluation_cpu_hours']:.2f} for its test"
        )
    days = sorted({cost["measured"][:10] for cost in priced.values()})
    versions = sorted({cost["code_version"] for cost in priced.values()})
    notes = sorted({cost["note"] for cost in priced.values() if cost.get("note")})
    return (
        f"- **{question}** Measured on one thread ({', '.join(days)}, at "
        f"{', '.join(versions)}{''.join(f'; {note}' for note in notes)}; "
        "results/reproduction/costs.json): "
        f"{'; '.join(parts)}. The table's training hours are the wall time these runs took "
        "here, with other jobs on the machine."
    )


def dlgm2_words() -> str:
    """How far the paper's 2-layer DLGM gets with a VAE under this protocol, against Burda et
    al.'s wider 2-layer VAE, and the lead over it that the paper's 2-layer VGP number implies
    beside the paper's 1-layer lead."""
    question = "How far does the paper's 2-layer DLGM get with a VAE here?"
    found = tested(DLGM2_VAE)
    if not found:
        runs_named = ", ".join(f"`{run}`" for _, run in DLGM2_VAE.runs)
        return f"- **{question}** Waiting for {runs_named}."
    nll, bound = mean_of(found, "nll"), mean_of(found, "bound_nll")
    seeds = plural(len(found), "seed")
    standard_errors = ""
    if len(found) == 1:
        test = found[0][2]
        standard_errors = f" (± {test['nll_stderr']:.2f} and ± {test['bound_nll_stderr']:.2f})"
    return (
        f"- **{question}** IS {nll:.2f}, -bound {bound:.2f}{standard_errors}, {seeds}. Burda "
        f"et al.'s 2-layer VAE on wider deterministic layers: {BURDA_DLGM2_VAE:.2f}. The "
        f"paper's 2-layer VGP, {PAPER_DLGM2_VGP:.2f}, would be {signed(nll - PAPER_DLGM2_VGP)} "
        f"nats better than this VAE's IS ({signed(bound - PAPER_DLGM2_VGP)} against its "
        f"-bound), where the paper's 1-layer VGP leads its VAE by {signed(PAPER_VAE - PAPER_VGP)}."
    )


def calibrated_answer() -> str:
    """The study's questions answered from the tested runs (each waits for its runs)."""
    return "\n".join(
        [
            difference_words(
                VAE, VGP, "VAE - VGP: does the VGP beat the VAE here?", PAPER_VAE - PAPER_VGP
            ),
            difference_words(CONTROL, VGP, "control - VGP: is it the GP?", None),
            flexibility_words(),
            dlgm2_words(),
            khat_words(),
            cost_words(),
        ]
    )


STUDY = Study(
    CALIBRATED,
    tables={"calibrated": calibrated_table, "calibrated-answer": calibrated_answer},
    values={
        "calibrated.paper_vgp": lambda: f"{PAPER_VGP:.2f}",
        "calibrated.paper_lead": lambda: f"{PAPER_VAE - PAPER_VGP:.2f}",
    },
)
