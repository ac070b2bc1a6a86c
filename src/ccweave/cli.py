"""The ``ccweave`` command: a thin shell that parses, calls the library and prints.

Each subcommand is one module in :mod:`ccweave.commands` with ``ORDER``,
``add_parser(subparsers)`` and ``run(args) -> int``; adding one is adding a module.
Errors ccweave raises on purpose become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import signal
import sys
import threading
from collections.abc import Iterator

from ccweave import __version__, commands
from ccweave.errors import CCWeaveError, Interrupted, printable, say
from ccweave.runtime.job import LAUNCHER_PID


def _command_modules(argv: list[str] | None = None) -> list:
    """The command modules, in ``ORDER``; only the one ``argv`` names when it names one
    (a command then loads its own library modules, not every other command's: ``topo
    show`` starts in half the time), else all (``--help``, a mistyped command)."""
    names = [info.name for info in pkgutil.iter_modules(commands.__path__)
             if not info.name.startswith("_")]
    word = next((arg for arg in argv or () if not arg.startswith("-")), None)
    chosen = [name for name in names if name.rstrip("_") == word]
    modules = [importlib.import_module(f"ccweave.commands.{name}") for name in chosen or names]
    return sorted(modules, key=lambda module: module.ORDER)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose one-line errors quote arguments printably."""

    def error(self, message: str):  # type: ignore[override]
        super().error(printable(message))


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser; with ``argv``, only the command it names (when it
    names one) is in it."""
    parser = _Parser(
        prog="ccweave",
        description="Synthesize, verify, simulate, bound, export and run collective "
                    "algorithms shaped to the machine.")
    parser.add_argument("--version", action="version", version=f"ccweave {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _command_modules(argv):
        module.add_parser(subparsers)
    return parser


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (``kill``, a job scheduler, ``timeout``) stops a command as Ctrl-C does:
    its ranks stopped, a testbed's namespaces and temporary folders removed, exit 143.
    Its default action ended ``ccweave bench`` at once and left 11 namespaces behind.
    Ranks a ccweave launcher started keep the default: their launcher cleans up."""
    if (threading.current_thread() is not threading.main_thread()
            or LAUNCHER_PID in os.environ):
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Interrupted(f"interrupted ({signal.Signals(signum).name})", signum)

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        with _sigterm_unwinds():
            return int(args.run(args) or 0)
    except Interrupted as error:
        say(f"ccweave: {printable(error)}")
        return 128 + error.signal_number
    except CCWeaveError as error:
        say("\n".join([f"ccweave: error: {printable(error)}",
                       *(f"  {printable(line)}" for line in error.details)]))
        return 2
    except KeyboardInterrupt:
        say("ccweave: interrupted")
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # the reader went away (`ccweave topo show dgx1 --json | head`): stop quietly, as
        # cat does, and keep Python from complaining again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (a socket's broken pipe
    is another matter)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(main())
