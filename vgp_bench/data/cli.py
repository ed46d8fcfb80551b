"""`vgp-data`: fetch and convert datasets into HDF5 under data/."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module exposing add_arguments(parser) and run(args) -> int, one-line help)
SUBCOMMANDS = {
    "mnist": ("vgp_bench.data.mnist_convert", "binarized MNIST (50k/10k/10k) into data/mnist.h5"),
    "sketch": (
        "vgp_bench.data.sketch_convert",
        "TU-Berlin sketches (18k/2k) into data/sketch-*.h5",
    ),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="vgp-data", description=__doc__)
    subparsers = parser.add_subparsers(dest="dataset", required=True)
    chosen = next((arg for arg in argv if arg in SUBCOMMANDS), None)
    module = None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text)
        if name == chosen:  # import only the dataset asked for
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
    args = parser.parse_args(argv)
    assert module is not None
    try:
        return int(module.run(args) or 0)
    except (OSError, ValueError, RuntimeError) as error:
        print(f"vgp-data {args.dataset}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
