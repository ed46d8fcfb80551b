"""The rules of the options of what a run builds (models, inference heads, optimizers and
schedules, the synthetic and Sketch loaders), declared once each, like schema.py's keys.

vgp-train checks them with its other settings before its run folder exists, so a value no part
accepts is one line naming the key, the value and what is allowed, instead of an error from
deep inside the part once the run has begun. A key checks only where the chosen config has it
(`model.latent_dims` under the DLGMs, `inference.jitter` under the VGP). The parts keep their
own checks of combinations (vgp_options.refuse_combinations). Imports neither torch nor Hydra;
tests/test_config_schema.py holds the names listed here to the registries they copy.
"""

from __future__ import annotations

from vgp_bench.run.config.rules import (
    boolean,
    integer,
    integer_list,
    integer_lists,
    number,
    number_list,
    one_of,
)
from vgp_bench.run.config.schema import Key

# nets.ACTIVATIONS, nets.INITIALIZATIONS, distributions.SCALE_LINKS, dlgm.OUTPUT_BIAS_STARTS
ACTIVATIONS = ("tanh", "relu", "elu")
INITIALIZATIONS = ("default", "glorot_uniform")
SCALE_LINKS = ("softplus", "exp")
OUTPUT_BIAS_STARTS = ("zero", "train_mean")
# the VGP's registries (vgp_options.choose): inputs, outputs, prior means, scales, objectives,
# warps, r's corrections and the paper objective's auxiliary structures
VGP_CHOICES = {
    "inputs": ("global", "amortized"),
    "outputs": ("dense", "global", "low_rank", "shared_basis"),
    "prior_mean": ("identity", "zero"),
    "mean_field_scale": ("context", "gp", "tied"),
    "objective": ("collapsed", "hierarchical", "paper"),
    "warp": ("gp", "linear"),
    "aux_correction": ("learned", "none"),
    "paper_auxiliary": ("factorized", "conditional"),
}
POSITIVE = number(positive=True)

# configs/model/*.yaml
MODEL_KEYS = (
    Key("model.latent_dims", list, integer_list(1, non_empty=True)),
    Key("model.hidden_dims", list, integer_lists(1)),
    Key("model.activation", str, one_of(*ACTIVATIONS)),
    Key("model.min_scale", float, number(at_least=0)),
    Key("model.scale_link", str, one_of(*SCALE_LINKS)),
    Key("model.init", str, one_of(*INITIALIZATIONS)),
    Key("model.output_bias", str, one_of(*OUTPUT_BIAS_STARTS)),
    *(
        Key(f"model.{name}", int, integer(1))
        for name in ("steps", "read_size", "write_size", "encoder_size", "decoder_size", "z_dim")
    ),
    Key("model.attention", bool, boolean),
)

# configs/inference/*.yaml (and vgp_form/)
INFERENCE_KEYS = (
    Key("inference.hidden_dims", list, integer_list(1)),
    Key("inference.aux_hidden_dims", list, integer_list(1)),
    Key("inference.activation", str, one_of(*ACTIVATIONS)),
    Key("inference.min_scale", float, number(at_least=0)),
    Key("inference.scale_link", str, one_of(*SCALE_LINKS)),
    Key("inference.init", str, one_of(*INITIALIZATIONS)),
    Key("inference.variational_data_size", int, integer(1)),
    Key("inference.latent_input_dim", int, integer(1, optional=True)),
    *(Key(f"inference.{name}", str, one_of(*names)) for name, names in VGP_CHOICES.items()),
    Key("inference.outputs_rank", int, integer(1)),
    Key("inference.aux_samples", int, integer(0)),
    Key("inference.noise_ratio", float, POSITIVE),
    Key("inference.kernel_variance", float, POSITIVE),
    Key("inference.kernel_inverse_lengthscale", float, number(positive=True, optional=True)),
    Key("inference.init_output_spread", float, number(at_least=0)),
    Key("inference.init_noise_scale", float, POSITIVE),
    Key("inference.jitter", float, POSITIVE),
    Key("inference.max_jitter", float, POSITIVE),
    Key("inference.leapfrog_steps", int, integer(1)),
    Key("inference.step_size", float, POSITIVE),
    Key("inference.flow_length", int, integer(0)),
    Key("inference.init_scale", float, number(at_least=0)),
)

# configs/optim/*.yaml: the optimizers' and schedules' arguments
OPTIMIZER_KEYS = (
    Key("optim.optimizer.lr", float, POSITIVE),
    Key("optim.optimizer.betas", list, number_list(2, at_least=0, below=1)),
    Key("optim.optimizer.eps", float, POSITIVE),
    Key("optim.optimizer.alpha", float, number(at_least=0, at_most=1)),
    Key("optim.optimizer.momentum", float, number(at_least=0)),
    Key("optim.optimizer.initial_second_moment", float, number(at_least=0)),
    Key("optim.optimizer.lagged", bool, boolean),
    Key("optim.optimizer.gradient_scale", float, POSITIVE),
    Key("optim.schedule.epsilon", float, number(at_least=0)),
    Key("optim.schedule.time_scale", float, POSITIVE),
    Key("optim.schedule.stages", int, integer(1)),
    Key("optim.schedule.growth", int, integer(1)),
    Key("optim.schedule.decay_stages", int, integer(1)),
)

# configs/dataset/*.yaml: the loaders' arguments beyond the data protocol (schema)
LOADER_KEYS = (
    Key("dataset.shape", list, integer_list(1, length=3)),
    Key("dataset.n_train", int, integer(1)),
    Key("dataset.n_valid", int, integer(1)),
    Key("dataset.n_test", int, integer(1)),
    Key("dataset.n_prototypes", int, integer(1)),
    Key("dataset.resolution", int, integer(1)),
    Key("dataset.dilation", int, integer(1, optional=True)),
)

OPTION_KEYS = (*MODEL_KEYS, *INFERENCE_KEYS, *OPTIMIZER_KEYS, *LOADER_KEYS)
