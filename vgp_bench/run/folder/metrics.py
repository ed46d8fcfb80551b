"""What a run writes in metrics.json, as typed records: the trainer and vgp-eval write them,
vgp-report reads them, and nobody else spells out a key.

A record is a typed view of one JSON object: each known key is an attribute (None when the file
lacks it), and the object itself is kept as read, so a file written by older code (missing
keys, keys since retired) is read, updated and written back without losing or adding anything.
This module imports neither torch nor Hydra: vgp-report reads records without them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from vgp_bench.data_identity import data_changes
from vgp_bench.errors import CorruptDataError
from vgp_bench.run.config.typed import top_level, trainer_settings

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from vgp_bench.run.folder.checkpoint import RunState

Value = TypeVar("Value")
Nested = TypeVar("Nested", bound="Record")


class Record:
    """A JSON object with typed attributes for its known keys."""

    def __init__(self, data: dict[str, Any] | None = None, **values: Any) -> None:
        self.data: dict[str, Any] = {} if data is None else data  # shared, not copied
        for name, value in values.items():
            if not isinstance(getattr(type(self), name, None), Key):
                raise TypeError(f"{type(self).__name__} has no key {name!r}")
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.data!r})"

    def has(self, name: str) -> bool:
        """Whether the object holds the key of attribute `name` (even as null)."""
        key = getattr(type(self), name)
        assert isinstance(key, Key)
        return key.name in self.data

    def update(self, values: Mapping[str, Any]) -> None:
        """Set several keys at once (for records whose keys are not all known in advance)."""
        self.data.update(values)

    def to_json(self) -> dict[str, Any]:
        return self.data


class Key(Generic[Value]):
    """One JSON key of a record: an attribute, None when the object lacks the key."""

    holds = "value"  # what the key holds, for `record_schema`: a value, a record, records

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, record: None, owner: type) -> Key[Value]: ...
    @overload
    def __get__(self, record: Record, owner: type) -> Value | None: ...
    def __get__(self, record: Record | None, owner: type) -> Any:
        if record is None:
            return self
        return record.data.get(self.name)

    def __set__(self, record: Record, value: Value | None) -> None:
        record.data[self.name] = value


class RecordKey(Key[Nested]):
    """A key holding another record (an object in the file)."""

    holds = "record"

    def __init__(self, kind: type[Nested]) -> None:
        self.kind = kind

    def __get__(self, record: Record | None, owner: type) -> Any:
        if record is None:
            return self
        value = record.data.get(self.name)
        return self.kind(value) if isinstance(value, dict) else None

    def __set__(self, record: Record, value: Nested | None) -> None:
        record.data[self.name] = None if value is None else value.data


class RecordListKey(Key[list[Nested]]):
    """A key holding a list of records (objects that are not are skipped)."""

    holds = "records"

    def __init__(self, kind: type[Nested]) -> None:
        self.kind = kind

    def __get__(self, record: Record | None, owner: type) -> Any:
        if record is None:
            return self
        value = record.data.get(self.name)
        if not isinstance(value, list):
            return None
        return [self.kind(item) for item in value if isinstance(item, dict)]

    def __set__(self, record: Record, value: list[Nested] | None) -> None:
        record.data[self.name] = None if value is None else [item.data for item in value]


class Evaluation(Record):
    """One importance-sampled evaluation of a split: metrics.json's `test`, or one of its
    `evaluations` (vgp-eval). Nats; `-log p(x)` from S importance samples, `-bound` its bound."""

    nll = Key[float]()
    nll_stderr = Key[float]()
    bound_nll = Key[float]()
    bound_nll_stderr = Key[float]()
    bound_gap = Key[float]()  # what a better q could gain
    bound_gap_stderr = Key[float]()
    is_samples = Key[int]()
    n_examples = Key[int]()
    is_below_bound = Key[bool]()
    pareto_k_mean = Key[float]()  # PSIS k-hat over examples (Vehtari et al.)
    pareto_k_max = Key[float]()
    pareto_k_above_0_7 = Key[float]()  # share of examples whose weights are not to be trusted
    split = Key[str]()
    weight = Key[dict[str, str]]()  # site -> which importance weight was used
    aux_gap = Key[float]()  # what a better r could gain (VGP, docs/design.md, section 5.1)
    aux_gap_stderr = Key[float]()
    aux_gap_bound_k0_nll = Key[float]()
    aux_gap_bound_nll = Key[float]()
    aux_gap_samples = Key[int]()
    aux_gap_draws = Key[int]()
    aux_gap_examples = Key[int]()
    aux_samples = Key[int]()  # written by older code
    aux_gap_skipped = Key[str]()  # what the auxiliary gap's budget left out, and how to get it
    per_example_file = Key[str]()
    step = Key[int]()  # the training step evaluated
    checkpoint = Key[str]()  # the checkpoint's file name (vgp-train: best.pt or the final step)
    epoch = Key[int]()  # vgp-train: the epoch whose parameters were tested
    subset = Key[int]()  # vgp-eval: eval.subset
    evaluated_at = Key[str]()  # vgp-eval: when
    run_steps = Key[int]()  # vgp-eval: the run's steps when it evaluated
    dataset = Key[dict[str, Any]]()  # vgp-eval: the data evaluated (`data_identity`); absent:
    # older code, which evaluated the data it was given, as the command line said


class EpochRecord(Record):
    """One entry of metrics.json's `history`: the bounds after an epoch, and the heads'
    diagnostics under `<site>/<statistic>` keys (e.g. the VGP's `z/warp_share`)."""

    epoch = Key[int]()
    step = Key[int]()
    train_bound = Key[float]()  # mean training bound over the epoch's finite steps
    valid_bound = Key[float]()  # the training objective on the validation split

    @property
    def diagnostics(self) -> dict[str, Any]:
        """The heads' statistics, `<site>/<statistic>` -> value."""
        return {key: value for key, value in self.data.items() if "/" in key}


class EpochEvaluation(Record):
    """One entry of metrics.json's `eval_at_epochs` (Table 2's test bounds during training)."""

    test_bound_nll = Key[float]()
    test_bound_nll_stderr = Key[float]()
    test_nll = Key[float]()
    is_samples = Key[int]()
    n_examples = Key[int]()


class DatasetRecord(Record):
    """metrics.json's `dataset`: the data protocol a run used (docs/design.md, section 6)."""

    name = Key[str]()
    binarization = Key[str]()
    merge_valid = Key[bool]()
    holdout = Key[int]()  # train and valid pooled, the last N images held out to validate
    split_sizes = Key[dict[str, int]]()


class RunRecord(Record):
    """metrics.json of one run: what it is (provenance), how far it got, its evaluations."""

    # provenance, written at every start (`describe`)
    run_id = Key[str]()  # the run's identity, drawn at its first start: copies share it
    experiment = Key[str]()
    model = Key[str]()
    inference = Key[str]()
    objective = Key[str]()  # the VGP's inference.objective
    aux_samples = Key[int]()
    structure = Key[str]()  # `family_structure`
    seed = Key[int]()
    code_version = Key[str]()
    dataset = RecordKey(DatasetRecord)
    optimizer = Key[str]()
    batch_size = Key[int]()
    train_samples = Key[int]()  # trainer.n_samples
    train_objective = Key[str]()  # trainer.objective
    # progress, written at every save
    status = Key[str]()  # running | interrupted | preempted | failed | finished
    error = Key[str]()
    stop_signal = Key[str]()  # the signal that stopped an interrupted run (SIGINT, SIGTERM)
    epochs_completed = Key[int]()
    steps = Key[int]()
    wall_time_s = Key[float]()
    history = RecordListKey(EpochRecord)
    eval_at_epochs = Key[dict[str, dict[str, Any]]]()  # epoch -> EpochEvaluation's object
    nonfinite_skipped = Key[int]()
    world_size = Key[int]()
    best_epoch = Key[int]()  # the epoch of the best validation bound (best.pt)
    stop_reason = Key[str]()  # epochs | max_steps | early_stopping (set when training ended)
    resume_changes = Key[list[dict[str, Any]]]()  # [{step, changes: {key: [old, new]}}]
    previous_attempt = Key[str]()  # where a start moved the folder's previous run or attempt
    # results
    test = RecordKey(Evaluation)  # the run's own final evaluation
    evaluations = RecordListKey(Evaluation)  # vgp-eval's, appended
    trivial_nll = Key[float]()  # D log 2 nats (see vgp_bench.divergence)
    diverged = Key[bool]()
    diverged_reason = Key[str]()

    def describe(self, cfg: DictConfig, dataset: dict[str, Any], version: str) -> None:
        """Record the provenance every metrics.json holds (docs/design.md, section 6)."""
        inference = cfg.inference
        if not self.run_id:  # kept across resumes; a copy of the folder keeps it too
            self.run_id = uuid.uuid4().hex
        self.experiment = cfg.get("experiment_name")
        self.model = cfg.model.get("name")
        self.inference = inference.get("name")
        self.objective = inference.get("objective")
        self.aux_samples = inference.get("aux_samples", 0)
        self.structure = family_structure(inference)
        self.seed = top_level(cfg).seed
        self.code_version = version
        self.dataset = DatasetRecord(dataset)
        self.optimizer = cfg.optim.get("name")
        trainer = trainer_settings(cfg)
        self.batch_size = trainer.batch_size
        self.train_samples = trainer.n_samples
        self.train_objective = trainer.objective

    def record_progress(
        self, state: RunState, status: str, error: str | None, world_size: int
    ) -> None:
        """How far the run got, from the loop's state (written at every save)."""
        self.status, self.error = status, error
        if status not in ("interrupted", "preempted"):
            self.data.pop("stop_signal", None)
        self.epochs_completed, self.steps = state.epoch, state.step
        self.wall_time_s = round(state.wall_time_s, 3)
        self.update({"history": state.history, "eval_at_epochs": state.eval_at_epochs})
        self.nonfinite_skipped = state.nonfinite_total
        self.world_size = world_size
        if state.best_epoch:
            self.best_epoch = state.best_epoch

    def record_failure(self, error: str) -> None:
        """Mark the run failed with `error`, its progress left as last recorded (never ahead of
        the checkpoint a resume starts from)."""
        self.status, self.error = "failed", error
        self.data.pop("stop_signal", None)

    def add_evaluation(self, evaluation: Evaluation) -> None:
        """Append a later evaluation (vgp-eval); it is `test` only when the run has none and
        it read the run's own data."""
        self.data.setdefault("evaluations", []).append(evaluation.data)
        if self.read_own_data(evaluation):
            self.data.setdefault("test", evaluation.data)

    def read_own_data(self, evaluation: Evaluation) -> bool:
        """Whether `evaluation` read the data the run trained on (one that does not say which
        data it read, as older ones and the end-of-training one, did)."""
        if evaluation.dataset is None:
            return True
        trained_on = self.dataset.to_json() if self.dataset is not None else {}
        return not data_changes(trained_on, evaluation.dataset)

    def epoch_evaluations(self) -> Iterator[tuple[str, EpochEvaluation]]:
        """`eval_at_epochs` as (epoch, record) pairs (entries that are not objects skipped)."""
        for epoch, entry in (self.eval_at_epochs or {}).items():
            if isinstance(entry, dict):
                yield epoch, EpochEvaluation(entry)


class NotAnObjectError(CorruptDataError):
    """A metrics.json that holds valid JSON, but not an object."""


class WrongShapeError(CorruptDataError):
    """A metrics.json whose object breaks the record's typed schema (`record_schema`)."""


def read_record(path: str | Path) -> RunRecord:
    """The record in a metrics.json (OSError, ValueError when unreadable, not an object, or a
    key of the wrong type: `record_schema`)."""
    from vgp_bench.run.folder.record_schema import record_problem

    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise NotAnObjectError("metrics.json does not hold a JSON object")
    problem = record_problem(data, RunRecord)
    if problem:
        raise WrongShapeError(f"metrics.json is not a run's record: {problem}")
    return RunRecord(data)


def write_record(record: RunRecord, path: str | Path) -> None:
    """Write metrics.json atomically (sorted keys, indented)."""
    from vgp_bench.run.folder.checkpoint import write_json  # here: readers of records need no torch

    write_json(record.to_json(), path)


def family_structure(inference: Any) -> str | None:
    """The structure of a VGP family in a few words (e.g. `dense T, zero mean, m=500`) from its
    inference config (a DictConfig or dict), which labels its rows: the warp's reach depends
    on it (docs/design.md, section 2.5). None for families without variational outputs."""
    outputs = inference.get("outputs")
    if outputs is None:
        return None
    if inference.get("warp") == "linear" and inference.get("prior_mean") == "zero":
        # the paper form's control: its variational data fitted by an affine map, no GP
        words = [f"{outputs} T, no GP (affine fit)", "zero mean"]
        words.append(f"m={inference.get('variational_data_size')}")
    elif inference.get("warp") == "linear":  # the control: the GP taken out
        words = ["no GP (linear warp)", f"{inference.get('prior_mean')} mean"]
        if inference.get("mean_field_scale") == "tied":
            words.append(f"sigma={inference.get('noise_ratio')} s")
    else:
        words = [f"{outputs} T"]
        if outputs in ("low_rank", "shared_basis"):
            words[0] += f" (r={inference.get('outputs_rank')})"
        words.append(f"{inference.get('prior_mean') or 'zero'} mean")
        if inference.get("mean_field_scale") == "tied":
            words.append(f"sigma={inference.get('noise_ratio')} s")
        words.append(f"m={inference.get('variational_data_size')}")
        if inference.get("objective") == "paper":
            words.append(f"r {inference.get('paper_auxiliary') or 'factorized'}")
    if inference.get("aux_correction") == "none":
        words.append("r fixed")
    return ", ".join(words)
