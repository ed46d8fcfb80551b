"""What old run folders and data files need, in one place: the config keys and values older
runs lack or name otherwise, the format-1 MNIST files still read, the kept snapshots of lost runs
and the divergence threshold of records that did not state it. The core reads the current format
and asks here about history; this module imports nothing of the project."""

from __future__ import annotations

import json
import math
import re
from typing import Any

# -- configs saved before a key existed or a value was renamed ---------------------------------
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


# Values renamed after runs already existed, each computing what the older value computed, bit
# for bit (tests/test_rmsprop.py): a run saved with the older value resumes under the newer
# one, and the report counts both in one row.
EQUIVALENT_VALUES: dict[str, dict[Any, Any]] = {
    "optim.optimizer._target_": {"torch.optim.RMSprop": "vgp_bench.optimizers.RMSprop"},
}


def is_equivalent_value(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `key`'s saved value is an older name of its new value (EQUIVALENT_VALUES)."""
    renamed = EQUIVALENT_VALUES.get(key)
    if renamed is None or key not in old or key not in new:
        return False
    older = old[key]
    return isinstance(older, str) and renamed.get(older) == new[key]


def is_older_default(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `key`, absent from a run's saved config, holds the value of the older code."""
    if key in old or key not in NEWER_KEYS:
        return False
    compatible = NEWER_KEYS[key]
    return compatible is ANY or new.get(key) == compatible


def with_older_defaults(config: dict[str, str]) -> dict[str, str]:
    """A flattened config (values as JSON text) with each absent newer key at its older value
    and each renamed value under its newer name, so runs started before a key existed or a
    value was renamed compare equal to runs that set it to that value."""
    filled = dict(config)
    for key, older in NEWER_KEYS.items():
        if key not in filled and older is not ANY:
            filled[key] = json.dumps(older, sort_keys=True)
    for key, renamed in EQUIVALENT_VALUES.items():
        for older_name, newer_name in renamed.items():
            if filled.get(key) == json.dumps(older_name, sort_keys=True):
                filled[key] = json.dumps(newer_name, sort_keys=True)
    return filled


# -- data files --------------------------------------------------------------------------------
# Why an MNIST file of an older format is rebuilt rather than read (vgp_bench/data/mnist.py).
OLD_MNIST_FORMATS = {
    1: "format 1 read mnist.pkl.gz's k / 256 intensities as k / 255: its grey levels above 128 "
    "are one step low and none is 255, so its binarizations are noisier than MNIST's",
}


def is_readable_old_mnist(attrs: dict[str, Any]) -> bool:
    """Whether an MNIST file of an older format is still read: format 1 made from IDX or .amat
    files (format 1 went wrong only in reading the pickle)."""
    from_pickle = str(attrs.get("split_rule", "")).startswith("pickle")
    return attrs.get("format_version") == 1 and not from_pickle


# -- run records and folders -------------------------------------------------------------------
# -log p(x) of the model that gives every pixel probability 1/2, for records that did not state
# it (`trivial_nll` in metrics.json): D log 2 nats (vgp_bench.divergence.trivial_nll).
TRIVIAL_NLL = {"mnist": 784 * math.log(2.0)}

# a study keeps the last snapshot of a run lost with its run folder (a checkout renewed without
# its git-ignored outputs/) as `<row>_lost<N>_s<seed>`: how far it came, in no table or curve
LOST_SNAPSHOT = re.compile(r".+_lost\d+_s\d+")


def is_lost_snapshot(name: str) -> bool:
    """Whether a run folder's name marks the kept snapshot of a run that was lost."""
    return LOST_SNAPSHOT.fullmatch(name) is not None
