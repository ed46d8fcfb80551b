"""The report's tables: Table 1's layout (IS -log p(x) and bound per row), Table 2's (the test
bound after each evaluated epoch), and the runs in no table; each built from the row model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vgp_bench.analysis.report.paper import (
    TABLE1_DATASET,
    paper_row,
    table2_epochs,
    table2_numbers,
)
from vgp_bench.analysis.report.rows import (
    MISSING,
    Row,
    Setting,
    display_folder,
    distinguishing_suffixes,
    estimate,
    format_data,
    format_difference,
    format_estimate,
    format_seeds,
    method_label,
    record,
    sort_key,
    test_estimate,
)
from vgp_bench.analysis.report.runs import Excluded, Run
from vgp_bench.divergence import is_finite_number

SPREAD_NOTE = (
    "± is the standard error of the mean over seeds (n - 1 denominator) when n > 1; "
    "with n=1 it is the standard error of that run's test-set estimate over test images."
)


@dataclass
class Table:
    """A table in no format yet: title, header, rows, notes, and its name in the CSV."""

    title: str
    headers: list[str]
    rows: list[Row]
    notes: list[str]
    name: str  # the CSV's `table` column: table1, table2, dataset:<name>, gaps:<name>, ...


def likelihood_table(dataset: str, groups: dict[Setting, list[Run]], with_paper: bool) -> Table:
    """Table 1 layout: IS -log p(x) and bound per row, with the paper's number and differences."""
    is_mnist = dataset == TABLE1_DATASET
    show_paper = with_paper and is_mnist
    headers = ["method", "seeds", "epochs", "-log p(x) (IS)", "bound"]
    if show_paper:
        headers += ["paper (≤)", "Δ IS", "Δ bound"]
    headers += ["data", "S", "K", "test N", "evaluation"]
    any_not_comparable = False
    settings = sorted(groups, key=sort_key)
    suffixes = distinguishing_suffixes(settings, table2=False)
    rows, any_below = [], False
    table_name = "table1" if is_mnist else f"dataset:{dataset}"
    for setting in settings:
        runs = groups[setting]
        nll, bound = test_estimate(runs, "nll"), test_estimate(runs, "bound_nll")
        below = any(run.test.is_below_bound for run in runs)
        any_below |= below
        paper_entry = paper_row(setting) if show_paper else None
        paper = paper_entry["value"] if paper_entry else None
        paper_is = paper_entry.get("is_value", paper) if paper_entry else None
        label = method_label(setting, table2=False) + suffixes[setting]
        row = [
            label,
            format_seeds(runs),
            "/".join(sorted({epochs_completed(run) for run in runs}, key=epoch_order)),
            format_estimate(nll, " §" if below else ""),
            format_estimate(bound),
        ]
        if show_paper:
            mark = "" if paper is None or paper_protocol(runs) else " *"
            any_not_comparable |= bool(mark)
            row += [
                MISSING if paper is None else f"{paper:.2f}",
                format_difference(nll, paper_is) + (mark if paper_is is not None else ""),
                format_difference(bound, paper) + mark,
            ]
            if paper_is != paper:
                row[-3] += f" (IS {paper_is:.2f})"
        evaluations = ", ".join(sorted({run.evaluation for run in runs}))
        row += [
            format_data(setting),
            str(setting.is_samples),
            str(setting.aux_samples),
            str(setting.test_examples),
            evaluations,
        ]
        rows.append(Row(row))
        for quantity, value, reference in (("nll", nll, paper_is), ("bound_nll", bound, paper)):
            rows[-1].records.append(
                record(
                    table_name,
                    label,
                    setting,
                    runs,
                    quantity=quantity,
                    epoch="",
                    mean=value.mean,
                    stderr=value.stderr,
                    stderr_over="seeds" if value.n > 1 else "test images",
                    paper="" if reference is None else reference,
                    difference="" if reference is None else value.mean - reference,
                    evaluation=evaluations,
                )
            )
    notes = [
        "Test set, nats, lower is better. -log p(x) (IS): importance-sampled estimate with S "
        "samples, a stochastic upper bound on -log p(x); bound: minus the variational bound "
        "(the training objective). K: auxiliary samples of the bound (0 = single sample).",
        SPREAD_NOTE,
        "data: binarization of the images (fixed = one Bernoulli draw, dynamic = a fresh draw "
        "every epoch), and train+valid when the validation set was merged into training. "
        "test N: test images evaluated. evaluation: each run's most precise test-set "
        "evaluation (the full test set first, then the largest S), made at the end of "
        "training or later by vgp-eval on the checkpoint named.",
    ]
    if show_paper:
        notes.append(
            "paper (≤): the paper's Table 1 has columns -log p(x) and ≤; every number we "
            "compare with is in its ≤ column: DLGM + VAE is Burda et al. (2016), an "
            "importance-sampled estimate (k = 5000); DRAW is Gregor et al. (2015), a variational "
            "bound; the paper does not say which estimator gives its VGP rows. NF, HVI and IWAE "
            "quote Rezende & Mohamed (2015), Salimans et al. (2015) and Burda et al. (2016); "
            "HVI also has an IS estimate in the paper's -log p(x) column, shown as (IS ...) and "
            "used for Δ IS. A row trained with IWAE (k samples) is set beside the paper's IWAE "
            "row where it has one, else beside its family's row. DLGM 2hl + VAE has no row in "
            "the paper. Δ = ours - paper (positive: ours is worse)."
        )
    if any_not_comparable:
        notes.append(
            "*: not the paper's protocol (the row's runs were not started from an "
            "experiment=table1_* or burda_* configuration: another budget or other settings; "
            "see its epochs): the Δ is not a comparison with the paper."
        )
    if any_below:
        notes.append(
            "§: in at least one run of this row the IS estimate of log p(x) came out below the "
            "bound (is_below_bound); too few importance samples or a bug: check those runs."
        )
    title = "Table 1: binarized MNIST" if is_mnist else f"Dataset {dataset}"
    return Table(title, headers, rows, notes, table_name)


def epoch_value(run: Run, epoch: int) -> tuple[float, float | None, bool] | None:
    """(bound nll, its stderr, from the final test) after `epoch` epochs, when measured."""
    entry = dict(run.record.epoch_evaluations()).get(str(epoch))
    if entry is not None and is_finite_number(entry.test_bound_nll):
        return entry.test_bound_nll, entry.test_bound_nll_stderr, False
    if run.record.epochs_completed == epoch:
        return run.test.data["bound_nll"], run.test.bound_nll_stderr, True
    return None


PAPER_EXPERIMENTS = ("table1_", "burda_")  # experiment/ files that set the paper's protocol


def paper_protocol(runs: list[Run]) -> bool:
    """Whether every run of a row used the paper's protocol (an experiment=table1_* or
    burda_* configuration), so that a difference from the paper compares like with like."""
    return all(str(run.record.experiment or "").startswith(PAPER_EXPERIMENTS) for run in runs)


def epoch_order(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (-1, text)


def epochs_completed(run: Run) -> str:
    record = run.record
    return str(record.epochs_completed if record.has("epochs_completed") else "?")


def sketch_table(groups: dict[Setting, list[Run]], with_paper: bool) -> Table:
    """Table 2 layout: the test bound after each evaluated epoch, with the paper's numbers."""
    settings = sorted(groups, key=sort_key)
    epochs = {
        int(epoch)
        for runs in groups.values()
        for run in runs
        for epoch in (run.record.eval_at_epochs or {})
    }
    paper_epochs = table2_epochs() if with_paper else set()
    epochs = sorted(epochs | paper_epochs)
    headers = ["method", "seeds"]
    for epoch in epochs:
        headers += [f"{epoch} ep"]
        if epoch in paper_epochs:
            headers += [f"paper {epoch}", f"Δ {epoch}"]
    headers += ["final bound", "data", "K"]
    suffixes = distinguishing_suffixes(settings, table2=True)
    rows, subset_sizes = [], set()
    used_final = partial_cells = False
    for setting in settings:
        runs = groups[setting]
        label = method_label(setting, table2=True) + suffixes[setting]
        paper_numbers = table2_numbers(setting)
        row = Row([label, format_seeds(runs)])
        for epoch in epochs:
            measured = [(run, epoch_value(run, epoch)) for run in runs]
            measured = [(run, value) for run, value in measured if value is not None]
            for run, _ in measured:
                entry = dict(run.record.epoch_evaluations()).get(str(epoch))
                if entry is not None and entry.has("n_examples"):
                    subset_sizes.add(int(entry.n_examples))
            ours = None
            marker = ""
            if measured:
                ours = estimate([v[0] for _, v in measured], [v[1] for _, v in measured])
                if any(v[2] for _, v in measured):
                    marker, used_final = " ‡", True
                if len(measured) != len(runs):
                    marker, partial_cells = f"{marker} (n={len(measured)})", True
            paper = paper_numbers.get(epoch) if with_paper else None
            row.cells.append(format_estimate(ours, marker))
            if epoch in paper_epochs:
                row.cells += [
                    MISSING if paper is None else f"{paper:.1f}",
                    format_difference(ours, paper),
                ]
            if ours is not None:
                row.records.append(
                    record(
                        "table2",
                        label,
                        setting,
                        [run for run, _ in measured],
                        quantity="bound_nll_at_epoch",
                        epoch=epoch,
                        mean=ours.mean,
                        stderr=ours.stderr,
                        stderr_over="seeds" if ours.n > 1 else "test images",
                        paper="" if paper is None else paper,
                        difference="" if paper is None else ours.mean - paper,
                    )
                )
        final = test_estimate(runs, "bound_nll")
        completed = sorted({epochs_completed(run) for run in runs})
        row.cells += [
            f"{format_estimate(final)} ({'/'.join(completed)} ep)",
            format_data(setting),
            str(setting.aux_samples),
        ]
        rows.append(row)
        row.records.append(
            record(
                "table2",
                label,
                setting,
                runs,
                quantity="final_bound_nll",
                epoch="/".join(completed),
                mean=final.mean,
                stderr=final.stderr,
                stderr_over="seeds" if final.n > 1 else "test images",
                paper="",
                difference="",
            )
        )
    sizes = ", ".join(str(size) for size in sorted(subset_sizes)) or "unrecorded"
    notes = [
        "Test set, nats, minus the variational bound (an upper bound on -log p(x)), lower is "
        f"better. Epoch columns: evaluated during training on {sizes} test images; final "
        "bound: after the last epoch, on all test images evaluated (epochs in brackets).",
        SPREAD_NOTE,
    ]
    if partial_cells:
        notes.append("(n=k) in a cell: only k of the row's seeds reached that epoch.")
    if used_final:
        notes.append(
            "‡: no evaluation at that epoch was logged; the final test bound of runs "
            "that stopped exactly there is shown instead."
        )
    if with_paper:
        notes.append(
            "paper: the paper's Table 2 (bounds after 100, 200, 300 epochs over the "
            "18,000 training images). Δ = ours - paper (positive: ours is worse)."
        )
    return Table("Table 2: Sketch", headers, rows, notes, "table2")


def excluded_table(excluded: Sequence[Excluded], diverged: bool = False) -> Table:
    """The runs in no table (or the diverged ones), with folder, status and error."""
    name = "diverged" if diverged else "not_in_tables"
    rows = [
        Row(
            [display_folder(run.folder), run.status, run.reason],
            [
                record(
                    name,
                    "",
                    None,
                    [],
                    folder=display_folder(run.folder),
                    status=run.status,
                    error=run.reason,
                )
            ],
        )
        for run in excluded
    ]
    if diverged:
        notes = [
            "Finished runs whose test result is not finite or worse than the model that gives "
            "every pixel probability 1/2 (D log 2 nats); --include-diverged puts the finite "
            "ones in the tables."
        ]
        title = "Diverged runs (not in the tables)"
    else:
        notes = [
            "Runs not finished (running: a live process holds its lock; stopped: its process is "
            "gone, resumable from its last.pt; unfinished: recorded at some step without a "
            "checkpoint, as a study's snapshot is; interrupted or preempted by a signal, "
            "resumable from its checkpoint), failed, unevaluated or unreadable "
            "runs, Hydra run folders without metrics.json, and copies: folders holding a run "
            "already counted (the same run_id, or the same setting and seed), each row "
            "counting a run and a seed once."
        ]
        title = "Not in the tables"
    return Table(title, ["folder", "status", "error"], rows, notes, name)
