"""`vgp-eval checkpoint=... eval.is_samples=K`: evaluate a checkpoint or a run folder, recorded
in its metrics.json when the folder is a run's."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from vgp_bench.data_identity import data_changes, data_identity, describe_changes
from vgp_bench.errors import MissingDataError
from vgp_bench.failures import USER_ERRORS, log_failure, print_error
from vgp_bench.run.config.command_line import refuse_bad_command_line
from vgp_bench.run.config.settings import check_added_keys, check_eval_settings, eval_command_keys
from vgp_bench.run.config.store import CONFIG_DIR
from vgp_bench.run.config.typed import eval_settings, trainer_settings
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.folder.folder_checks import refuse_misplaced_entries
from vgp_bench.run.folder.metrics import Evaluation, read_record, write_record
from vgp_bench.run.folder.run_folder import (
    check_record,
    claimed,
    clear_orphans,
    refuse_if_locked,
    refuse_links,
)
from vgp_bench.run.folder.run_identity import refuse_foreign_checkpoint, refuse_nested
from vgp_bench.run.loop.build import checkpoint_config, components_from_checkpoint
from vgp_bench.run.loop.evaluate import (
    EvaluationRequest,
    evaluate_components,
    evaluation_journal,
    format_summary,
)
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.host_memory import keep_freed_memory
from vgp_bench.run.process.runtime import apply_threads
from vgp_bench.run.process.signals import (
    EvaluationInterrupted,
    exit_status,
    interruptible,
    run_command,
    stop_signals,
)

# How vgp-eval goes on when the run folder is busy (it writes into the run's own folder).
EVAL_BUSY_ADVICE = "or evaluate a copy of the run folder"


def run_folder_of(checkpoint: Path) -> Path:
    """The run folder of `<run>/checkpoints/x.pt`, else the checkpoint's own folder."""
    parent = checkpoint.parent
    return parent.parent if parent.name == "checkpoints" else parent


def resolve_checkpoint(given: Path) -> Path:
    """The checkpoint file to evaluate: `given`, or for a run folder its best.pt, else its
    last.pt; a missing file's error says what the folder has instead."""
    if given.is_dir():  # a run folder, or its checkpoints/
        folder = given if given.name == "checkpoints" else given / "checkpoints"
        for name in ("best.pt", "last.pt"):
            if (folder / name).is_file():
                return folder / name
        raise MissingDataError(
            f"checkpoint {given} is a folder without checkpoints/best.pt or last.pt; give a "
            "run folder or a checkpoint file"
        )
    if not given.exists() and (given.parent / "last.pt").is_file():
        raise MissingDataError(
            f"checkpoint {given} not found; this run has {given.parent / 'last.pt'} (best.pt "
            "is written only after a validated epoch)"
        )
    return given


def recording_problem(run_dir: Path) -> str | None:
    """Why an evaluation of a checkpoint in `run_dir` cannot be added to its record, or None."""
    record = run_dir / "metrics.json"
    if not (record.exists() or record.is_symlink()):
        return f"{run_dir} holds no run (no metrics.json)"
    if not os.access(run_dir, os.W_OK) or not os.access(run_dir / "metrics.json", os.W_OK):
        return f"{run_dir} is read-only"
    return None


def not_recorded_notice(run_dir: Path, problem: str) -> str:
    """The notice vgp-eval prints when its result goes nowhere but the screen."""
    return (
        f"the result was not recorded: {problem}; to record it, evaluate the checkpoint "
        "inside its run folder where that is writable (a copy of the folder will do)"
    )


def evaluate_checkpoint(
    checkpoint_path: str,
    eval_cfg: DictConfig,
    device_name: str = "auto",
    data_dir: str | None = None,
) -> Evaluation:
    """Rebuild a run from its checkpoint, evaluate it, and add the result to its metrics.json.

    The evaluation is appended to `evaluations`; the run's own `test` result is never
    replaced (it is filled in only when the run has none). The folder is locked meanwhile,
    and the log goes to its eval.log.
    """
    check_eval_settings(OmegaConf.create({"eval": eval_cfg}))
    path = resolve_checkpoint(Path(checkpoint_path))
    run_dir = run_folder_of(path)
    refuse_nested(run_dir, "a checkpoint to evaluate")
    writable = recording_problem(run_dir) is None  # else nothing is written anywhere
    if writable:
        refuse_links(run_dir)
        refuse_misplaced_entries(run_dir)
        check_record(run_dir)
        refuse_if_locked(run_dir, EVAL_BUSY_ADVICE)
    checkpoint = load_checkpoint(path)
    if writable:
        refuse_foreign_checkpoint(path, checkpoint, run_dir)
    cfg = checkpoint_config(checkpoint, device_name, data_dir)
    cfg.eval = OmegaConf.merge(cfg.eval, eval_cfg)
    settings = eval_settings(cfg)
    parts = components_from_checkpoint(cfg, checkpoint)
    step = int(checkpoint.get("state", {}).get("step", -1))
    trained = max(step, 0) * trainer_settings(cfg).batch_size if "trainer" in cfg else None
    claim = (
        claimed(run_dir, "vgp-eval", "eval.log", EVAL_BUSY_ADVICE)
        if writable
        else nullcontext(None)
    )
    with claim as log, stop_signals() as request:
        log = log or logging.getLogger(__name__)
        if writable:
            clear_orphans(run_dir, log)
        log.info("evaluating %s (step %d): %s", path, step, OmegaConf.to_container(cfg.eval))
        journal = None
        if writable:
            journal = evaluation_journal(parts, settings, run_dir, log)
        try:
            with interruptible(request):
                request = EvaluationRequest(
                    settings.is_samples,
                    progress=True,
                    run_dir=run_dir if writable else None,
                    with_diagnostics=True,
                    journal=journal,
                    trained_examples=trained,
                    step=step,
                )
                evaluation = evaluate_components(parts, settings, DistributedContext(), request)
        except EvaluationInterrupted:
            if journal is not None and journal.path.exists():
                log.info(
                    "interrupted; the finished batches are kept in %s: "
                    "run the same command again to resume",
                    journal.path.name,
                )
            else:
                log.info("interrupted; nothing was recorded")
            raise
        except BaseException as error:
            log_failure(log, error, isinstance(error, USER_ERRORS))
            if writable:
                error.add_note(f"traceback in {run_dir / 'eval.log'}")
            raise
        evaluation.checkpoint = path.name  # the record adds what was evaluated, and when
        evaluation.step = step
        evaluation.subset = settings.subset
        evaluation.evaluated_at = datetime.now().astimezone().isoformat(timespec="seconds")
        evaluation.dataset = data_identity(parts.data.info)
        metrics_path = run_dir / "metrics.json"
        if writable:
            record = read_record(metrics_path)
            evaluation.run_steps = record.steps
            trained_on = record.dataset.to_json() if record.dataset is not None else {}
            if changes := data_changes(trained_on, parts.data.info):
                log.warning(
                    "evaluated on other data than the run trained on: %s", describe_changes(changes)
                )
            record.add_evaluation(evaluation)
            write_record(record, metrics_path)
        if journal is not None:
            journal.discard()
        log.info("result: %s", evaluation.to_json())
    return evaluation


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="evaluate")
def _hydra_main(cfg: DictConfig) -> None:
    if OmegaConf.is_missing(cfg, "checkpoint") or not cfg.checkpoint:
        print(
            "vgp-eval: error: checkpoint is required: vgp-eval "
            "checkpoint=outputs/<run>/checkpoints/last.pt",
            file=sys.stderr,
        )
        sys.exit(1)
    try:
        overrides = list(HydraConfig.get().overrides.task)
        check_added_keys(overrides, cfg, eval_command_keys(), "vgp-eval")
        check_eval_settings(OmegaConf.create({"threads": cfg.get("threads")}))
        threads = apply_threads(cfg.get("threads"))
        print(f"vgp-eval: {threads}, {keep_freed_memory()}", file=sys.stderr)
        checkpoint = resolve_checkpoint(Path(str(cfg.checkpoint)))
        if checkpoint != Path(str(cfg.checkpoint)):
            print(f"vgp-eval: evaluating {checkpoint}", file=sys.stderr)
        evaluation = evaluate_checkpoint(
            str(checkpoint), cfg.eval, device_name=cfg.device, data_dir=cfg.data_dir
        )
    except EvaluationInterrupted as signal_name:
        print(
            f"vgp-eval: {signal_name}: stopped; the finished batches are kept in the run "
            "folder (unless it is read-only): run the same command again to resume",
            file=sys.stderr,
        )
        sys.exit(exit_status(str(signal_name)))
    except Exception as error:
        print_error("vgp-eval", error, expected=isinstance(error, USER_ERRORS))
        sys.exit(1)
    print(format_summary(evaluation))
    run_dir = run_folder_of(checkpoint)
    problem = recording_problem(run_dir)
    if problem is None:
        print(f"recorded in {run_dir / 'metrics.json'} (evaluations)")
    else:
        print(f"vgp-eval: {not_recorded_notice(run_dir, problem)}", file=sys.stderr)


def main() -> None:
    refuse_bad_command_line("vgp-eval", sys.argv[1:])
    run_command("vgp-eval", _hydra_main)


if __name__ == "__main__":
    main()
