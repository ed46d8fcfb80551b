"""A DRAW pair's realizations: seed 0 trained on two machines (whose floats differ from the first
step on), then further seeds; how far they lie apart against the VAE - VGP difference."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from vgp_bench.analysis.report.rows import estimate
from vgp_bench.studies import runs
from vgp_bench.studies.cells import MISSING, difference_cell, estimate_cell, table
from vgp_bench.studies.differences import paired_cell

# each family's two realizations of seed 0: the first machine's runs, tested on the first 1000
# test images before that machine was replaced with their folders (snapshots of commit 7970b27
# renamed `_lost1`), and this machine's, whose floats differ from the first step on
REALIZATIONS = (("the first machine's (lost)", "_lost1_s0"), ("this machine's", "_s0"))
RUN_NAME = re.compile(r"draw_(?:vae|vgp_default)_s(\d+)")


def realizations(study: str) -> list[tuple[str, str]]:
    """Every pair of DRAW runs of one realization, as (label, run-name suffix): seed 0's two
    realizations, then this machine's further seeds (SEEDS in scripts/study_draw.sh)."""
    seeds = {
        int(match[1])
        for path in runs.runs_dir(study).glob("draw_*")
        if (match := RUN_NAME.fullmatch(path.name))
    }
    further = [(f"this machine's, seed {seed}", f"_s{seed}") for seed in sorted(seeds - {0})]
    return [*REALIZATIONS, *further]


def realization_rows(study: str, families: Sequence[tuple[str, str]]) -> list[list[object]]:
    """Each family's realizations at their end-of-training tests, a row each."""
    rows: list[list[object]] = []
    for label, run in families:
        for machine, suffix in realizations(study):
            name = run.removesuffix("_s0") + suffix
            metrics = runs.load(study, name) if runs.has_run(study, name) else {}
            test = runs.first_test(study, name)
            cells: list[object] = [f"{label}, {machine}"]
            if not metrics:
                rows.append([*cells, "not run", *[MISSING] * 5])
                continue
            history = metrics["history"]
            last_bound = f"{history[-1]['valid_bound']:.2f}" if history else MISSING
            cells += [metrics["epochs_completed"], last_bound]
            if test is None:
                rows.append([*cells, runs.where_it_is(metrics), MISSING, MISSING, MISSING])
                continue
            cells += [test["n_examples"], test["is_samples"]]
            cells += [estimate_cell(metrics, test, key) for key in ("nll", "bound_nll")]
            rows.append(cells)
    return rows


def compared(study: str, families: Sequence[tuple[str, str]]) -> list[tuple[str, list[str], bool]]:
    """(label, the two runs, whether it is a pair's VAE - VGP, which the mean row pools)."""
    between = [
        (
            f"{label}: the first machine's - this machine's",
            [run.removesuffix("_s0") + suffix for _, suffix in REALIZATIONS],
            False,
        )
        for label, run in families
    ]
    pairs = [
        (f"VAE - VGP, {machine}", [run.removesuffix("_s0") + suffix for _, run in families], True)
        for machine, suffix in realizations(study)
    ]
    return between + pairs


def difference_rows(study: str, families: Sequence[tuple[str, str]]) -> list[list[object]]:
    """The differences between seed 0's realizations and each pair's VAE - VGP, and their mean
    with its standard error over the pairs."""
    rows: list[list[object]] = []
    leads: dict[str, list[float]] = {"nll": [], "bound_nll": []}
    for name, names, pooled in compared(study, families):
        tests = [runs.first_test(study, run) for run in names]
        if tests[0] is None or tests[1] is None:
            rows.append([name, "waiting for both runs", MISSING, MISSING])
            continue
        cells: list[object] = [name]
        for key in ("nll", "bound_nll"):
            diff = tests[0][key] - tests[1][key]
            se = math.hypot(tests[0][f"{key}_stderr"], tests[1][f"{key}_stderr"])
            cells.append(difference_cell(diff, se))
            if pooled:
                leads[key].append(diff)
        (row_a, seed), (row_b, _) = runs.row_and_seed(names[0]), runs.row_and_seed(names[1])
        cells.insert(2, paired_cell(study, (row_a, row_b), seed, (tests[0], tests[1]), "nll"))
        rows.append(cells)
    if len(leads["nll"]) >= 2:
        label = (
            f"VAE - VGP, the mean over the {len(leads['nll'])} pairs (standard error over the "
            "pairs)"
        )
        means = [estimate(leads[key], [None]) for key in ("nll", "bound_nll")]
        cells = [difference_cell(mean.mean, mean.stderr) for mean in means]
        rows.append([label, cells[0], MISSING, cells[1]])
    return rows


def realizations_table(study: str, families: Sequence[tuple[str, str]]) -> str:
    """Each family's realizations (seed 0 on two machines, then further seeds) at their
    end-of-training tests (the same first test images and S); the differences between seed 0's
    realizations, each pair's VAE - VGP, and their mean with its standard error over the pairs
    (the spread between realizations, which no standard error over the test images holds).
    `families`: (label, seed 0's run) of the VAE and of the VGP."""
    header = ["", "epochs", "last valid bound", "test images", "S", "-log p(x) (IS)", "-bound"]
    header_differences = ["", "-log p(x) (IS)", "IS, paired over the test images", "-bound"]
    return (
        table(header, realization_rows(study, families))
        + "\n"
        + table(header_differences, difference_rows(study, families))
    )


def realization_spread(study: str, vae: str, vgp: str) -> str:
    """How far the two realizations of the VAE row `vae` lie apart on their first test images,
    against the VAE - VGP difference of the first machine's runs, in words; once this machine's
    pair is tested too, the VGP's spread and whether the difference keeps its sign."""
    vaes = [runs.first_test(study, f"{vae}{suffix}") for _, suffix in REALIZATIONS]
    vgps = [runs.first_test(study, f"{vgp}{suffix}") for _, suffix in REALIZATIONS]
    if any(test is None for test in [*vaes, vgps[0]]):
        return "is not measured yet"
    spread = abs(vaes[0]["nll"] - vaes[1]["nll"])
    lead = vaes[0]["nll"] - vgps[0]["nll"]
    images = vaes[0]["n_examples"]
    more = "more" if spread > abs(lead) else "less"
    text = (
        f"lie {spread:.2f} nats apart (IS, the first {images} test images), {more} than the "
        f"{abs(lead):.2f} nats by which the first machine's "
        + ("VGP led its VAE" if lead > 0 else "VAE led its VGP")
    )
    if vgps[1] is None:
        return text
    this_lead = vaes[1]["nll"] - vgps[1]["nll"]
    kept = "keeps its sign" if lead * this_lead > 0 else "changes sign"
    return (
        f"{text}; the two of DRAW + VGP, the default, lie "
        f"{abs(vgps[0]['nll'] - vgps[1]['nll']):.2f} nats apart, and VAE - VGP is {lead:+.2f} "
        f"nats on the first machine's pair and {this_lead:+.2f} on this machine's: it {kept} "
        "from one realization of the pair to the other"
    )
