"""The console scripts vgp-train, vgp-eval and vgp-fit. A Ctrl-C at any moment, even while
torch loads, stops a command with one line; options that only print (--help, --cfg, ...)
answer without loading torch."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from vgp_bench.failures import refuse
from vgp_bench.run.process.signals import run_command

# Hydra options that print something and run nothing
PRINT_ONLY = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion")


# Hydra's modes, of which a command line may name one (its long and short spellings)
MODES = {
    "--run": "--run", "-r": "--run", "--multirun": "--multirun", "-m": "--multirun",
    "--cfg": "--cfg", "-c": "--cfg", "--info": "--info", "-i": "--info",
    "--shell-completion": "--shell-completion", "-sc": "--shell-completion",
}  # fmt: skip


def modes_named(arguments: Sequence[str]) -> list[str]:
    """The distinct Hydra modes the command line names, in its order."""
    options = (argument.split("=")[0] for argument in arguments)
    return list(dict.fromkeys(MODES[option] for option in options if option in MODES))


def prints_only(arguments: Sequence[str]) -> bool:
    """Whether the command line asks Hydra only to print (help, config, info)."""
    return any(argument.split("=")[0] in PRINT_ONLY for argument in arguments)


def print_only(config_name: str) -> None:
    """Hydra's answer to --help, --cfg, --info for `config_name`, with nothing else loaded."""
    import hydra

    from vgp_bench.run.config.store import CONFIG_DIR  # the schemas registered first

    @hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name=config_name)
    def nothing(_cfg: object) -> None:  # Hydra prints and exits before it would run this
        return None

    nothing()


def entry(command: str, module: str, config_name: str) -> None:
    """Run `module`'s Hydra command, or only print what the command line asks for; a bad value
    of a key the schemas type is one line before Hydra composes (run/config/command_line.py)."""
    from vgp_bench.run.config.command_line import refuse_bad_command_line

    refuse_bad_command_line(command, sys.argv[1:])
    modes = modes_named(sys.argv[1:])
    if len(modes) > 1:  # Hydra would raise it with a traceback
        refuse(
            command,
            f"{' and '.join(modes)} cannot go together: name one of --run, --multirun, --cfg, "
            "--info and --shell-completion",
        )
    if prints_only(sys.argv[1:]):
        print_only(config_name)
        return
    importlib.import_module(module)._hydra_main()


def train() -> None:
    """`vgp-train`."""
    run_command("vgp-train", lambda: entry("vgp-train", "vgp_bench.run.commands.train", "config"))


def evaluate() -> None:
    """`vgp-eval`."""
    run_command(
        "vgp-eval", lambda: entry("vgp-eval", "vgp_bench.run.commands.eval_command", "evaluate")
    )


def fit() -> None:
    """`vgp-fit`."""
    run_command("vgp-fit", lambda: entry("vgp-fit", "vgp_bench.blackbox.cli", "fit"))
