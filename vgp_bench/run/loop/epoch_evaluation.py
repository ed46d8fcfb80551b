"""The evaluations a training run makes: the validation bound each epoch, the test bound at
the epochs asked for, the heads' statistics and the final test."""

from __future__ import annotations

from pathlib import Path

import torch

from vgp_bench.diagnostics import head_diagnostics
from vgp_bench.run.config.declarations import Eval, Trainer
from vgp_bench.run.folder.eval_journal import EvaluationJournal
from vgp_bench.run.folder.metrics import EpochEvaluation, Evaluation
from vgp_bench.run.loop.build import Components
from vgp_bench.run.loop.evaluate import EvaluationRequest, evaluate_components
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.runtime import make_generator


def validation_bound(
    parts: Components, trainer: Trainer, settings: Eval, context: DistributedContext
) -> float:
    """The training objective on the validation split (IWAE's: its IS estimate at k =
    trainer.valid_samples)."""
    request = EvaluationRequest(
        trainer.valid_samples, split="valid", subset=trainer.valid_subset or 0
    )
    valid = evaluate_components(parts, settings, context, request)
    return -(valid.nll if trainer.objective == "iwae" else valid.bound_nll)


def epoch_test(parts: Components, settings: Eval, context: DistributedContext) -> EpochEvaluation:
    """The test bound after an epoch of `trainer.eval_at_epochs` (Table 2's columns)."""
    request = EvaluationRequest(settings.epoch_is_samples)
    test = evaluate_components(parts, settings, context, request)
    return EpochEvaluation(
        test_bound_nll=test.bound_nll,
        test_bound_nll_stderr=test.bound_nll_stderr,
        test_nll=test.nll,
        is_samples=test.is_samples,
        n_examples=test.n_examples,
    )


def final_test(
    parts: Components,
    trainer: Trainer,
    settings: Eval,
    context: DistributedContext,
    run_dir: Path,
    journal: EvaluationJournal | None = None,
    trained_examples: int | None = None,
) -> Evaluation:
    """The evaluation at the end of training, with the VGP's auxiliary gap within the budget
    of a run that trained on `trained_examples`; with a `journal`, a stopped one resumes after
    its finished batches."""
    request = EvaluationRequest(
        settings.is_samples,
        progress=trainer.progress,
        run_dir=run_dir,
        with_diagnostics=True,
        journal=journal,
        trained_examples=trained_examples,
    )
    return evaluate_components(parts, settings, context, request)


def head_statistics(parts: Components, count: int, settings: Eval) -> dict[str, float]:
    """The heads' own statistics (the VGP's warp share) on the first `count` validation
    examples, with a fixed generator: the same draws every epoch."""
    valid = parts.data.valid
    assert valid is not None
    x = valid.gather(torch.arange(min(count, len(valid)))).to(parts.device)
    generator = make_generator(parts.device, settings.seed)
    return head_diagnostics(parts.model, parts.heads, x, generator)
