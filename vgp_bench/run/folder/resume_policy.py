"""What a resume may change: the saved config against the new one, the data it trained on, the
checkpoint it resumes from, and the evaluation settings of a finished run (the keys' policy
is config/keys')."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vgp_bench.data_identity import data_changes, describe_changes
from vgp_bench.errors import RunFolderError
from vgp_bench.run.config.keys import (
    NEWER_KEYS,
    is_equivalent_value,
    is_older_default,
    is_resumable_key,
)
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.folder.metrics import read_record


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists and scalars are leaves."""
    if isinstance(node, dict) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): node}


def resume_changes(
    saved: dict[str, Any], current: dict[str, Any], run_dir: Path
) -> dict[str, list[Any]]:
    """The changed keys a resume accepts, `{key: [old, new]}`; raise on any other change."""
    old, new = flatten(saved), flatten(current)
    changed = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    refused = [
        key
        for key in changed
        if not (
            is_resumable_key(key)
            or is_older_default(key, old, new)
            or is_equivalent_value(key, old, new)
        )
    ]
    if refused:
        shown = ", ".join(f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in refused[:4])
        more = f" and {len(refused) - 4} more" if len(refused) > 4 else ""
        top = refused[0].split(".")[0]
        raise RunFolderError(
            f"{run_dir} holds a run with a different '{top}' config ({shown}{more}); these "
            "change what the run computes: resume with the same settings, or write into a "
            "new folder (hydra.run.dir=...)"
        )
    return {key: [old.get(key), new.get(key)] for key in changed}


def refuse_data_change(run_dir: Path, current: Mapping[str, Any]) -> None:
    """Refuse to resume the run in `run_dir` on data other than the data it trained on (a file
    rebuilt or replaced since): its steps so far and the ones to come would mix two datasets."""
    path = run_dir / "metrics.json"
    recorded = read_record(path).dataset if path.exists() else None
    changes = data_changes(recorded.to_json() if recorded is not None else {}, current)
    if not changes:
        return
    raise RunFolderError(
        f"{run_dir} holds a run that trained on other data than {current.get('path', 'now')} "
        f"({describe_changes(changes)}): resume it on the data it started with (data_dir=..., "
        "with code that reads that file), or start the run again in a new folder "
        "(hydra.run.dir=...) or in this one (trainer.move_aside=true keeps the old run)"
    )


def load_to_resume(path: Path, advice: str) -> dict[str, Any]:
    """The checkpoint `path` of a run to resume; unreadable, the error ends with `advice`, how
    the run can go on."""
    try:
        return load_checkpoint(path, map_location="cpu")
    except ValueError as error:
        reason = str(error).split("; delete it")[0]
        raise RunFolderError(f"{reason}; {advice}") from error


def load_last_checkpoint(last: Path) -> dict[str, Any]:
    """`last.pt` to resume from; unreadable, the error says how the run can go on."""
    return load_to_resume(
        last,
        "move it out of the folder and run again to restart the run from scratch (its record "
        "is kept in a sibling folder), or write into a new folder (hydra.run.dir=...)",
    )


def load_best_checkpoint(best: Path) -> dict[str, Any]:
    """`best.pt` of a run to resume (its final test may evaluate it); unreadable, the error
    says how the run can go on."""
    return load_to_resume(
        best,
        "move it out of the folder and run again (the run's next validated epoch writes a new one)",
    )


# eval keys that change no number of a run's test result
EVAL_BOOKKEEPING = ("eval.at_end", "eval.save_per_example", "eval.epoch_is_samples")


def trains_further(state: dict[str, Any], trainer: DictConfig) -> bool:
    """Whether a run resumed from a checkpoint's `state` would train more under `trainer`."""
    if state.get("stop_reason") == "early_stopping":
        return False
    max_steps = trainer.get("max_steps")
    if max_steps is not None and int(state.get("step", 0)) >= int(max_steps):
        return False
    return int(state.get("epoch", 0)) < int(trainer.epochs)


def refuse_evaluation_changes(
    run_dir: Path, state: dict[str, Any], cfg: DictConfig, changes: dict[str, list[Any]]
) -> None:
    """Refuse other `eval.*` settings on a finished, tested run that would not train more:
    its test result would stay as it is while config.yaml said otherwise."""
    changed = sorted(
        key
        for key in changes
        if key.startswith("eval.")
        and key not in EVAL_BOOKKEEPING
        and not (changes[key][0] is None and key in NEWER_KEYS)  # added since: its default
    )
    if not changed or trains_further(state, cfg.trainer):
        return
    record = read_record(run_dir / "metrics.json") if (run_dir / "metrics.json").exists() else None
    if record is None or record.status != "finished" or record.test is None:
        return
    shown = ", ".join(f"{key}: {changes[key][0]!r} -> {changes[key][1]!r}" for key in changed)
    asked = " ".join(f"{key}={changes[key][1]}" for key in changed)
    raise RunFolderError(
        f"{run_dir} holds a finished run, tested with other evaluation settings ({shown}); "
        f"to evaluate it again, run vgp-eval checkpoint={run_dir} {asked} (added to its "
        "metrics.json), or train in a new folder (hydra.run.dir=...)"
    )
