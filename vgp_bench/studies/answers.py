"""A study's questions answered in words from the differences of its rows over seeds: beyond
3 standard errors of the per-seed differences or not, the range 3 leave open and the seeds that
would close it; a model with fewer seeds than measure their own spread is read against a
yardstick: the spread between seeds of the same question measured on other runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vgp_bench.studies import runs
from vgp_bench.studies.cells import difference_cell, signed, test_image_noise
from vgp_bench.studies.differences import (
    any_pair,
    beyond_three_se,
    difference,
    paired_cells,
    seed_difference,
    seeds_for_three_se,
)
from vgp_bench.studies.spread import deviation_interval


@dataclass(frozen=True)
class Question:
    """A question one pair of rows answers (a - b, positive: b is better), and its verdicts."""

    asked: str
    a: str
    b: str
    b_better: str  # what b beating a means
    a_better: str  # what a beating b means


@dataclass(frozen=True)
class Yardstick:
    """Where a model answered from too few seeds takes its spread between seeds: the same
    question's rows (a, b) in a study whose seeds measure it, and how the README names them."""

    study: str
    rows: Mapping[str, tuple[str, str]]  # question asked -> (a, b) of that study
    label: str  # e.g. "dlgm2 at 100 epochs (results/vgp_vs_vae)"


@dataclass(frozen=True)
class Questions:
    """A study's questions by model, and the seeds each model's answer waits for."""

    by_model: Mapping[str, Sequence[Question]]
    pairs: Sequence[tuple[str, str, str]]  # the differences table's rows: "model: words", a, b
    seeds: Mapping[str, int]  # the seeds every row of a model has before it is answered
    yardstick: Mapping[str, Yardstick]  # a model with fewer seeds -> where its spread comes from
    spread_seeds: int = 3  # the fewest seeds whose own spread a model's answer is read against


def pair_label(questions: Questions, a: str, b: str) -> str:
    """The words for the difference a - b, without the model's name."""
    label = next(label for label, x, y in questions.pairs if (x, y) == (a, b))
    return label.split(": ", 1)[1]


def answer_rows(questions: Questions, model: str, asked: str) -> tuple[str, str]:
    """The two rows (a, b) whose difference a - b answers a model's question."""
    for question in questions.by_model[model]:
        if question.asked == asked:
            return question.a, question.b
    raise ValueError(f"the {model} answer asks no question {asked!r}")


def answer_names(questions: Questions, model: str) -> list[str]:
    """The rows a model's answer reads."""
    return sorted({name for q in questions.by_model[model] for name in (q.a, q.b)})


def answer_seeds(study: str, questions: Questions, model: str) -> list[int]:
    """The seeds tested in every row of a model's answer."""
    names = answer_names(questions, model)
    return sorted(set.intersection(*(set(runs.tested_seeds(study, name)) for name in names)))


def seed_cost_hours(study: str, names: Sequence[str]) -> float:
    """The training hours one more seed of each row costs: the mean over its tested seeds."""
    total = 0.0
    for name in names:
        hours = [
            runs.training_hours(runs.load(study, f"{name}_s{seed}"))
            for seed in runs.tested_seeds(study, name)
        ]
        total += statistics.fmean(h for h in hours if h is not None)
    return total


def seed_spread(yardstick: Yardstick, asked: str) -> tuple[float, list[int]] | None:
    """The standard deviation between seeds of a question's IS difference on a yardstick's
    rows, over the seeds both have tested, and those seeds (None with fewer than two)."""
    a, b = yardstick.rows[asked]
    study = yardstick.study
    seeds = sorted(set(runs.tested_seeds(study, a)) & set(runs.tested_seeds(study, b)))
    if len(seeds) < 2:
        return None
    return statistics.stdev(difference(a, b, seeds, "nll", study)[2]), seeds


def measured_on_few_seeds(
    study: str, questions: Questions, question: Question, seeds: Sequence[int]
) -> str:
    """A question's mean difference over a few seeds, with the test images' noise, in words."""
    a, b = question.a, question.b
    diff = difference(a, b, seeds, "nll", study)[0]
    of_seeds = (
        f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of seeds {', '.join(map(str, seeds))}"
    )
    noise = (
        f"paired over the test images, their noise only: "
        f"{paired_cells(study, a, b, seeds, show=test_image_noise)}"
        if any_pair(study, a, b, seeds)
        else "not paired over the test images: no stored pair of per-example files"
    )
    words = pair_label(questions, a, b)
    return f"{words}, test -log p(x) (IS), {of_seeds}: {signed(diff)} ({noise})"


def yardstick_answer(
    study: str, questions: Questions, model: str, question: Question, seeds: Sequence[int]
) -> str:
    """A question answered from fewer seeds than measure their own spread: the mean difference
    against 3 standard errors of the yardstick's spread between seeds, with how far that
    spread is known."""
    asked = question.asked
    diff = difference(question.a, question.b, seeds, "nll", study)[0]
    measured = measured_on_few_seeds(study, questions, question, seeds)
    yardstick = questions.yardstick[model]
    spread = seed_spread(yardstick, asked)
    if spread is None or spread[0] == 0:
        missing = "has fewer than two seeds" if spread is None else "does not spread over its seeds"
        return (
            f"- **{asked}** Not answerable yet: {measured}. The spread between seeds is not "
            f"measured here, and the same difference in {yardstick.label} {missing}."
        )
    deviation, other_seeds = spread
    se = deviation / math.sqrt(len(seeds))
    low, high = deviation_interval(len(other_seeds))
    ratio = abs(diff) / se
    a, b = yardstick.rows[asked]
    per_seed = difference(a, b, other_seeds, "nll", yardstick.study)[2]
    spread_words = (
        f"The spread between seeds is not measured here. The nearest measured is the same "
        f"question's difference in {yardstick.label}: {', '.join(signed(d) for d in per_seed)} "
        f"over seeds {', '.join(map(str, other_seeds))}, a standard deviation of "
        f"{deviation:.2f} nats (95% interval {low * deviation:.2f} to {high * deviation:.2f}, "
        f"from {len(other_seeds)} seeds); by it, this difference's standard error is {se:.2f} "
        f"nats and the difference {ratio:.1f} of them"
    )
    if not beyond_three_se(diff, se):
        return (
            f"- **{asked}** Unsettled with {len(seeds)} seed"
            f"{'s' if len(seeds) > 1 else ''}: {measured}. {spread_words}, within 3 of zero: "
            f"3 leave open anything from {signed(diff - 3 * se)} to {signed(diff + 3 * se)} "
            "nats."
        )
    verdict = question.b_better if diff > 0 else question.a_better
    if ratio / 3 >= high:
        return (
            f"- **{asked}** Yes: {verdict}, beyond 3 standard errors even at the top of that "
            f"spread's interval. {measured}. {spread_words}."
        )
    return (
        f"- **{asked}** Yes if seeds spread as in {yardstick.label}: {verdict}. {measured}. "
        f"{spread_words}. Seeds spreading {ratio / 3:.1f} times as widely, inside its interval, "
        "would bring it within 3 standard errors of zero."
    )


def seeds_answer(study: str, questions: Questions, question: Question, seeds: Sequence[int]) -> str:
    """A question answered from its own seeds' spread: beyond 3 standard errors of the per-seed
    differences, or what 3 leave open."""
    a, b = question.a, question.b
    diff, se, per_seed = seed_difference(a, b, seeds, "nll", study)
    measured = (
        f"{pair_label(questions, a, b)}, test -log p(x) (IS) over seeds "
        f"{', '.join(map(str, seeds))}: "
        f"{difference_cell(diff, se)} (per seed {', '.join(signed(d) for d in per_seed)})"
    )
    if beyond_three_se(diff, se):
        verdict = question.b_better if diff > 0 else question.a_better
        return f"- **{question.asked}** Yes: {verdict}, beyond 3 SE. {measured}."
    needed = seeds_for_three_se(diff, se, len(seeds))
    need = f"about {needed:.0f} seeds" if needed < 1000 else "more than a thousand seeds"
    return (
        f"- **{question.asked}** Not measurably: {measured}, within 3 SE of zero. 3 SE leave "
        f"open anything from {signed(diff - 3 * se)} to {signed(diff + 3 * se)} nats; at "
        f"this difference and spread between seeds, 3 SE would take {need} a row."
    )


def answer(study: str, questions: Questions, model: str, min_seeds: int | None = None) -> str:
    """The answer to each question of a model's rows, in words from the differences over the
    seeds all its rows have; from fewer seeds, against the yardstick model's spread; and what
    one more seed costs."""
    min_seeds = questions.seeds[model] if min_seeds is None else min_seeds
    common = answer_seeds(study, questions, model)
    if len(common) < min_seeds:
        seeds = ", ".join(str(seed) for seed in common) or "none"
        return (
            f"Waiting for {min_seeds} seed{'s' if min_seeds > 1 else ''} tested in every "
            f"{model} row (tested in all of them so far: {seeds})."
        )
    few = len(common) < questions.spread_seeds and model in questions.yardstick
    lines = [
        yardstick_answer(study, questions, model, question, common)
        if few
        else seeds_answer(study, questions, question, common)
        for question in questions.by_model[model]
    ]
    names = answer_names(questions, model)
    cost = seed_cost_hours(study, names)
    lines.append(
        f"- One more seed of the {len(names)} {model} rows costs {cost:.1f} training hours on "
        "one core (the mean of the seeds tested), the validation and the tests on top."
    )
    return "\n".join(lines)
