"""Importance-sampled log-likelihood and bound of a split (the estimates every evaluation makes),
the evaluation journal of a run, and the summary line."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import torch
from torch import Tensor, nn
from tqdm import tqdm

from vgp_bench.data.base import ImageSplit
from vgp_bench.diagnostics import auxiliary_gap, evaluation_mode
from vgp_bench.errors import ConfigError
from vgp_bench.estimators import chunked_estimate
from vgp_bench.files import atomic_file
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.run.config.declarations import Eval
from vgp_bench.run.folder.eval_journal import EvaluationJournal, weights_sha256
from vgp_bench.run.folder.metrics import Evaluation
from vgp_bench.run.loop.build import Components
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.runtime import code_version, make_generator

# An IS estimate may dip below the bound by Monte Carlo noise; flag it past this many nats.
BELOW_BOUND_TOLERANCE = 0.05


@dataclass
class SplitEstimate:
    """Per-example estimates over one split, `[N]` each."""

    log_likelihood: Tensor
    bound: Tensor
    is_samples: int
    pareto_k: Tensor | None = None  # PSIS k-hat of each example's weights (float64)

    def summary(self) -> Evaluation:
        """Mean -log p(x) and -bound with standard errors, in nats."""
        count = self.log_likelihood.numel()
        nll = -self.log_likelihood.double()
        bound_nll = -self.bound.double()

        def stderr(v):
            return float(v.std() / math.sqrt(count)) if count > 1 else float("nan")

        is_below_bound = float(nll.mean()) > float(bound_nll.mean()) + BELOW_BOUND_TOLERANCE
        evaluation = Evaluation(
            nll=float(nll.mean()),
            nll_stderr=stderr(nll),
            bound_nll=float(bound_nll.mean()),
            bound_nll_stderr=stderr(bound_nll),
            bound_gap=float((bound_nll - nll).mean()),  # what a better q could gain
            bound_gap_stderr=stderr(bound_nll - nll),
            is_samples=self.is_samples,
            n_examples=count,
            is_below_bound=is_below_bound,
        )
        add_pareto_summary(evaluation, self.pareto_k)
        return evaluation


def add_pareto_summary(evaluation: Evaluation, pareto_k: Tensor | None) -> None:
    """Reliability of the IS estimates: PSIS k-hat over examples (Vehtari et al.).

    `pareto_k_above_0_7` is the share of examples whose weights have (nearly) infinite
    variance: their IS log-likelihood is not to be trusted at this S.
    """
    if pareto_k is None:
        return
    finite = pareto_k[torch.isfinite(pareto_k)]
    if finite.numel() == 0:  # not computed (S < 25, or flat weights): no share either
        evaluation.pareto_k_mean, evaluation.pareto_k_max = None, None
        evaluation.pareto_k_above_0_7 = None
        return
    evaluation.pareto_k_mean = float(finite.mean())
    evaluation.pareto_k_max = float(finite.max())
    evaluation.pareto_k_above_0_7 = float((pareto_k > 0.7).double().mean())


@torch.no_grad()
def estimate_split(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    split: ImageSplit,
    is_samples: int,
    chunk_size: int,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device,
    progress: bool = False,
    description: str = "evaluate",
    journal: EvaluationJournal | None = None,
) -> SplitEstimate:
    """IS log-likelihood (logsumexp(log w) - log K) and bound per example, K in chunks.

    With a `journal`, the finished batches are kept after each one and a rerun resumes
    after them, with the numbers an uninterrupted evaluation gives.
    """
    start = 0
    estimates: dict[str, list[Tensor]] = {"log_likelihood": [], "bound": [], "pareto_k": []}
    if journal is not None:
        start, estimates = journal.restore(generator, len(split), batch_size)
    batches = split.batches(batch_size, start=start, generator=generator)
    bar = tqdm(  # in samples (examples x S), updated after every chunk: a rate and an ETA
        initial=min(start * batch_size, len(split)) * is_samples,  # even for one huge batch
        total=len(split) * is_samples,
        desc=description,
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
        unit="sample",
        unit_scale=True,
    )

    def draw(count: int, sample: Callable[..., Tensor], examples: int) -> Tensor:
        log_weights = sample(count, generator)
        bar.update(count * examples)
        return log_weights

    with bar, evaluation_mode(model, heads):
        for batch_index, x in enumerate(batches, start=start):
            x = x.to(device, non_blocking=True)
            sample = model.log_weight_sampler(x, heads)  # the per-example work once a batch
            estimate = chunked_estimate(
                lambda count, sample=sample, examples=x.shape[0]: draw(count, sample, examples),
                n_samples=is_samples,
                chunk_size=chunk_size,
            )
            assert estimate.pareto_k is not None
            estimates["log_likelihood"].append(estimate.log_likelihood.cpu())
            estimates["bound"].append(estimate.bound.cpu())
            estimates["pareto_k"].append(estimate.pareto_k.cpu())
            if journal is not None:
                journal.record(batch_index + 1, estimates, generator)
    return SplitEstimate(
        torch.cat(estimates["log_likelihood"]),
        torch.cat(estimates["bound"]),
        is_samples,
        torch.cat(estimates["pareto_k"]),
    )


@dataclass(frozen=True)
class EvaluationRequest:
    """One evaluation of a split: its importance samples, and what it adds to the estimates."""

    is_samples: int
    split: str | None = None  # None: eval.split
    subset: int | None = None  # the first N images; None: eval.subset, 0: all
    progress: bool = False
    run_dir: Path | None = None  # where eval.save_per_example writes its file
    with_diagnostics: bool = False  # the VGP's auxiliary gap (final evaluations)
    journal: EvaluationJournal | None = None  # this rank's: the evaluation resumes after it
    trained_examples: int | None = None  # the budget of eval.aux_gap_budget=auto
    step: int | None = None  # the step of the evaluated parameters (per-example file's name)


def evaluate_components(
    parts: Components, settings: Eval, context: DistributedContext, request: EvaluationRequest
) -> Evaluation:
    """IS log-likelihood and bound on a split, sharded over ranks; per-example file when asked
    (named after the split, S, the images, the parameters' `step` and the data; see
    `per_example_name`).

    The request's `with_diagnostics` (final evaluations) adds the VGP's auxiliary gap on the
    first `eval.aux_gap_examples` examples, within the budget of a run that trained on
    `trained_examples` (see `aux_gap_examples`); its `journal` (this rank's) keeps the finished
    batches, and the evaluation resumes after them.
    """
    split_name = request.split or settings.split
    split: ImageSplit | None = getattr(parts.data, split_name, None)
    if split is None:
        raise ConfigError(f"eval.split={split_name} does not exist for this dataset")
    subset = request.subset if request.subset is not None else settings.subset
    if subset:
        split = split.subset(subset)
    indices = torch.arange(len(split))[context.rank :: context.world_size]
    estimate = estimate_split(
        parts.model,
        parts.heads,
        split.select(indices),
        request.is_samples,
        settings.chunk_size,
        settings.batch_size,
        make_generator(parts.device, settings.seed + context.rank),
        parts.device,
        progress=request.progress and context.is_main,
        description=f"IS x{request.is_samples}",
        journal=request.journal,
    )
    if context.enabled:  # put every rank's examples back in split order
        pieces = context.gather_objects(
            (indices, estimate.log_likelihood, estimate.bound, estimate.pareto_k)
        )
        order = torch.cat([piece[0] for piece in pieces]).argsort()
        estimate.log_likelihood = torch.cat([piece[1] for piece in pieces])[order]
        estimate.bound = torch.cat([piece[2] for piece in pieces])[order]
        estimate.pareto_k = torch.cat([piece[3] for piece in pieces])[order]
    evaluation = estimate.summary()
    evaluation.split = split_name
    weights = {
        name: head.evaluation_weight
        for name, head in parts.heads.items()
        if head.evaluation_weight is not None
    }
    if weights:
        evaluation.weight = weights
    examples, skipped = aux_gap_examples(settings, request.trained_examples)
    if skipped and request.with_diagnostics and has_auxiliary_model(parts.heads):
        evaluation.aux_gap_skipped = skipped
    if request.with_diagnostics and examples > 0 and context.is_main:
        gap = auxiliary_gap(
            parts.model,
            parts.heads,
            split.subset(examples),
            settings.aux_gap_samples,
            settings.aux_gap_draws,
            make_generator(parts.device, settings.seed + 1),
            parts.device,
            progress=request.progress and context.is_main,
        )
        evaluation.update(gap)
    if settings.save_per_example and request.run_dir is not None and context.is_main:
        first = len(split) if subset else 0
        name = per_example_name(
            split_name, request.is_samples, parts.data.info, subset=first, step=request.step
        )
        path = request.run_dir / name
        save_per_example(estimate, path)
        evaluation.per_example_file = path.name
    return evaluation


def per_example_name(
    split_name: str,
    is_samples: int,
    data_info: dict[str, Any],
    subset: int = 0,
    step: int | None = None,
) -> str:
    """`<split>_per_example_k<K>[_first<N>][_step<N>][_data-<8 hex>].h5`.

    Every part that can differ between two evaluations of one run keeps their files apart: the
    first N images of a subset, the training step of the evaluated parameters where the caller
    names one (vgp-eval of best.pt against last.pt; a run's own final test is one per run and
    has none), and the data file's content digest, where it has one (a rebuilt file, say).
    """
    first = f"_first{subset}" if subset else ""
    at_step = f"_step{step}" if step is not None and step >= 0 else ""
    digest = data_info.get("content_sha256")
    tag = f"_data-{str(digest)[:8]}" if digest else ""
    return f"{split_name}_per_example_k{is_samples}{first}{at_step}{tag}.h5"


AUX_GAP_MINIMUM = 20  # fewer examples than this: no auxiliary gap (its error would be noise)


def has_auxiliary_model(heads: nn.ModuleDict) -> bool:
    """Whether a family has an auxiliary model whose gap the final evaluation measures."""
    return any(head.has_auxiliary_samples for head in heads.values())


def aux_gap_examples(settings: Eval, trained_examples: int | None) -> tuple[int, str | None]:
    """How many examples the end-of-run auxiliary gap uses, and what it skipped (or None).

    `eval.aux_gap_budget=auto` spends at most the training's own work: examples x draws x
    auxiliary samples evaluations against the examples trained, so a smoke run ends in about
    the time of its steps and a table run gets all `eval.aux_gap_examples`; `full` always
    takes them all.
    """
    wanted = settings.aux_gap_examples
    if wanted <= 0 or settings.aux_gap_budget == "full" or trained_examples is None:
        return wanted, None
    per_example = max(1, settings.aux_gap_samples * settings.aux_gap_draws)
    affordable = trained_examples // per_example
    if affordable >= wanted:
        return wanted, None
    examples = affordable if affordable >= AUX_GAP_MINIMUM else 0
    done = f"on {examples} of {wanted} examples" if examples else "skipped"
    return examples, (
        f"auxiliary gap {done}: eval.aux_gap_budget=auto spends at most the training's work "
        f"({trained_examples} examples trained); eval.aux_gap_budget=full computes it on all "
        f"{wanted} (vgp-eval checkpoint=<run> eval.aux_gap_budget=full adds it later)"
    )


def save_per_example(estimate: SplitEstimate, path: str | Path) -> None:
    """Per-example IS log-likelihood and bound as HDF5 datasets (written atomically)."""
    with atomic_file(path) as temporary, h5py.File(temporary, "w") as handle:
        handle.create_dataset("log_likelihood", data=estimate.log_likelihood.numpy())
        handle.create_dataset("bound", data=estimate.bound.numpy())
        if estimate.pareto_k is not None:
            handle.create_dataset("pareto_k", data=estimate.pareto_k.numpy())
        handle.attrs["is_samples"] = estimate.is_samples


def evaluation_journal(
    parts: Components, settings: Eval, run_dir: Path, log: logging.Logger
) -> EvaluationJournal:
    """The journal of a final evaluation of `parts` on the split of `settings` (one process).

    Its fingerprint is what the numbers depend on; a journal resumes only when all of it
    matches: the weights, the data, the settings, the device and torch.
    """
    dataset = {key: value for key, value in parts.data.info.items() if key != "path"}
    fingerprint = {
        "weights_sha256": weights_sha256({"model": parts.model, "heads": parts.heads}),
        "dataset": json.dumps(dataset, sort_keys=True, default=str),  # source, binarization
        "split": settings.split,
        "subset": settings.subset or None,
        "is_samples": settings.is_samples,
        "chunk_size": settings.chunk_size,
        "batch_size": settings.batch_size,
        "seed": settings.seed,
        "device": parts.device.type,  # CPU and CUDA draw different numbers from one seed
        "torch": str(torch.__version__),
    }
    return EvaluationJournal(run_dir, fingerprint, log, code_version())


def format_summary(evaluation: Evaluation, label: str | None = None) -> str:
    """A short human-readable table of one evaluation, its row named by `label` or else by the
    split evaluated."""
    label = label or str(evaluation.split or "test")
    lines = [
        f"{'':<10} {'-log p(x) (IS)':>18} {'-bound':>18}   samples  examples",
        f"{label:<10} {evaluation.nll:>10.2f} ± {evaluation.nll_stderr:<5.2f} "
        f"{evaluation.bound_nll:>10.2f} ± {evaluation.bound_nll_stderr:<5.2f}"
        f"   {evaluation.is_samples:>7}  {evaluation.n_examples:>8}",
    ]
    for site, weight in (evaluation.weight or {}).items():
        if "infinite variance" in weight:
            lines.append(f"WARNING: site {site}: {weight}")
    share = evaluation.pareto_k_above_0_7
    if share:
        lines.append(
            f"WARNING: {100 * share:.1f}% of examples have PSIS k-hat > 0.7: their weights have "
            "nearly infinite variance; raise eval.is_samples or distrust those estimates"
        )
    if evaluation.is_below_bound:
        lines.append("WARNING: the IS estimate is below the bound on average: check the weights")
    if evaluation.aux_gap_skipped:
        lines.append(f"note: {evaluation.aux_gap_skipped}")
    return "\n".join(lines)
