"""Which config keys change what a run computes: the resume policy and the report's rows."""

from __future__ import annotations

import json
from typing import Any

# Keys a resumed run may change: none of them alters what the run computes (the training
# trajectory); `eval` is every evaluation setting. Any other difference refuses the resume.
RESUMABLE_KEYS = (
    "device",
    "threads",
    "data_dir",
    "experiment_name",
    "eval",
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.log_every",
    "trainer.checkpoint_every",
    "trainer.valid_samples",
    "trainer.valid_subset",
    "trainer.eval_at_epochs",
    "trainer.image_every",
    "trainer.max_nonfinite",
    "trainer.progress",
    "trainer.resume",
    "trainer.move_aside",
    "trainer.compile",
    "trainer.ddp_backend",
    "trainer.find_unused_parameters",
    "trainer.diagnostics_examples",
    "trainer.compile_mode",
    "trainer.gpu_memory_fraction",
    "trainer.early_stopping.patience",
)

# Keys added to the configs after runs already existed: a run whose saved config lacks one
# resumes when the key holds the value that computes what the older code computed (ANY: the
# key changes nothing unless another, older key turns it on).
ANY = object()
NEWER_KEYS: dict[str, Any] = {
    "trainer.objective": "elbo",
    "inference.prior_mean": "zero",
    "inference.paper_auxiliary": "factorized",
    "inference.warp": "gp",
    "inference.aux_correction": "learned",
    "inference.noise_ratio": ANY,  # read only by mean_field_scale=tied, newer itself
    "inference.init_noise_scale": ANY,  # read only by prior_mean=identity
    "trainer.init_model": None,
    "trainer.train_model": True,
    "trainer.shuffle": True,
    "trainer.early_stopping.patience": None,
    "trainer.early_stopping.min_delta": ANY,  # read only with a patience, newer itself
    "eval.checkpoint": ANY,  # resumable: an older run's resume may set it
    "eval.aux_gap_budget": ANY,  # resumable, like every eval key
    "threads": ANY,  # how many CPU threads: never what a run computes
    "dataset.holdout": None,
    "model.scale_link": "softplus",
    "model.init": "default",
    "model.output_bias": "zero",
    "inference.scale_link": "softplus",
    "inference.init": "default",
}


def is_older_default(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `key`, absent from a run's saved config, holds the value of the older code."""
    if key in old or key not in NEWER_KEYS:
        return False
    compatible = NEWER_KEYS[key]
    return compatible is ANY or new.get(key) == compatible


def is_resumable_key(key: str) -> bool:
    """Whether a resumed run may change `key` (RESUMABLE_KEYS or one of their children)."""
    return any(key == allowed or key.startswith(allowed + ".") for allowed in RESUMABLE_KEYS)


# Resumable keys that change a run's numbers: runs that differ in them are different rows
RESULT_KEYS = (
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.valid_samples",
    "trainer.valid_subset",
    "trainer.early_stopping.patience",
    "eval.checkpoint",
)


def is_operational_key(key: str) -> bool:
    """Whether `key` changes neither a run's training nor its numbers (device, logging,
    checkpoint cadence, the evaluation's own settings, whose S and test size rows keep apart)."""
    return is_resumable_key(key) and not any(
        key == result or key.startswith(result + ".") for result in RESULT_KEYS
    )


def with_older_defaults(config: dict[str, str]) -> dict[str, str]:
    """A flattened config (values as JSON text) with each absent newer key at its older value,
    so runs started before a key existed compare equal to runs that set it to that value."""
    filled = dict(config)
    for key, older in NEWER_KEYS.items():
        if key not in filled and older is not ANY:
            filled[key] = json.dumps(older, sort_keys=True)
    return filled
