"""`vgp-data`: fetch and convert datasets into HDF5 under data/."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing add_arguments(parser) and run(args) -> int
SUBCOMMANDS = {
    "mnist": "vgp_bench.data.mnist",
    "sketch": "vgp_bench.data.sketch",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vgp-data", description=__doc__)
    subparsers = parser.add_subparsers(dest="dataset", required=True)
    modules = {}
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        modules[name] = module
        sub = subparsers.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.add_arguments(sub)
    args = parser.parse_args(argv)
    try:
        return int(modules[args.dataset].run(args) or 0)
    except (OSError, ValueError, RuntimeError) as error:
        print(f"vgp-data {args.dataset}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
