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

from ccweave import __version__, _startup, commands, interrupts  # noqa: F401 (_startup)
from ccweave.errors import CCWeaveError, Interrupted, OutputError, printable, say
from ccweave.runtime.job import LAUNCHER_PID

OPTIONAL_PACKAGES = {
    "torch": "pip install 'ccweave[torch]' (scripts/setup.sh pins the CPU build, torch==2.13.0)",
    "mpi4py": "pip install 'ccweave[mpi]' (and Open MPI: apt-get install openmpi-bin "
              "libopenmpi-dev)",
}
"""Extras a command may need that ``pip install ccweave`` leaves out, and how to add them."""


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

    def _print_message(self, message: str, file=None) -> None:  # type: ignore[override]
        """argparse's, but a help text that cannot be written says so (argparse drops
        the error: ``--help > /dev/full`` ended 0 with nothing written)."""
        if message and (file is None or file is sys.stdout) and sys.stdout is not None:
            try:
                sys.stdout.write(message)
                sys.stdout.flush()
            except BrokenPipeError:
                raise
            except OSError as error:
                raise OutputError.of(error) from None
            return
        super()._print_message(message, file)


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
    """SIGTERM (``kill``, a job scheduler, ``timeout``) and SIGHUP (the terminal closed)
    stop a command as Ctrl-C does: its ranks stopped, a testbed's namespaces and temporary
    folders removed, exit 143 (129). Their default action ended ``ccweave bench`` at once
    and left 11 namespaces behind, and ``run`` its folder of progress records.
    Both are remembered (:mod:`ccweave.interrupts`): one whose exception Python swallowed
    still stops the command. Ranks a ccweave launcher started keep the defaults: their
    launcher cleans up."""
    if (threading.current_thread() is not threading.main_thread()
            or LAUNCHER_PID in os.environ):
        yield
        return

    def stop(signum: int, frame: object) -> None:
        interrupts.note(signum)
        raise Interrupted(f"interrupted ({signal.Signals(signum).name})", signum)

    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, stop)}
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup's stays ignored
        old[signal.SIGHUP] = signal.signal(signal.SIGHUP, stop)
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler,  # not if ignored
                                           interrupts.ctrl_c):
        old[signal.SIGINT] = signal.signal(signal.SIGINT, interrupts.ctrl_c)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        try:
            args = build_parser(argv).parse_args(argv)
        except SystemExit:  # --help, --version, a usage error: what it printed must arrive
            _flush_stdout()
            raise
        with _sigterm_unwinds():
            interrupts.check()  # one swallowed while the command loaded: run nothing
            code = int(args.run(args) or 0)
            interrupts.check()  # a signal whose exception was swallowed still counts
        _flush_stdout()
        return code
    except OutputError as error:
        say(f"ccweave: error: {printable(error)}")
        _discard_stdout()
        return 2
    except Interrupted as error:
        interrupts.forget()
        say(f"ccweave: {printable(error)}")
        return 128 + error.signal_number
    except CCWeaveError as error:
        say("\n".join([f"ccweave: error: {printable(error)}",
                       *(f"  {printable(line)}" for line in error.details)]))
        return 2
    except KeyboardInterrupt:
        interrupts.forget()
        say("ccweave: interrupted")
        return 130
    except ModuleNotFoundError as error:
        fix = OPTIONAL_PACKAGES.get((error.name or "").partition(".")[0])
        if fix is None:
            raise
        say(f"ccweave: error: this command needs {error.name}, which this Python "
            f"({sys.executable}) cannot import: {fix}")
        return 2
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # the reader went away (`ccweave topo show dgx1 --json | head`): stop quietly, as
        # cat does, and keep Python from complaining again when it flushes stdout at exit
        _discard_stdout()
        return 128 + signal.SIGPIPE


def _flush_stdout() -> None:
    """Flush what the command printed, so a write that fails says so here (one line, exit
    2) and not in a complaint of Python's at exit (with exit code 0 or 120)."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as error:
        raise OutputError.of(error) from None


def _discard_stdout() -> None:
    """Send what is left of standard output to /dev/null: Python flushes it at exit."""
    if sys.stdout is None:
        return
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


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
