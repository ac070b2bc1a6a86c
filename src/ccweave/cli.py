"""The ``ccweave`` command: a thin shell that parses, calls the library and prints.

Each subcommand is one module in :mod:`ccweave.commands` with ``ORDER``,
``add_parser(subparsers)`` and ``run(args) -> int``; adding one is adding a module.
Errors ccweave raises on purpose become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from ccweave import __version__, commands
from ccweave.errors import CCWeaveError


def _command_modules() -> list:
    modules = [importlib.import_module(f"ccweave.commands.{info.name}")
               for info in pkgutil.iter_modules(commands.__path__)
               if not info.name.startswith("_")]
    return sorted(modules, key=lambda module: module.ORDER)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ccweave",
        description="Synthesize, verify, simulate, bound, export and run collective "
                    "algorithms shaped to the machine.")
    parser.add_argument("--version", action="version", version=f"ccweave {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _command_modules():
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except CCWeaveError as error:
        print(f"ccweave: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ccweave: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
