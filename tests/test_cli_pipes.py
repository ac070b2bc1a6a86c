"""A reader that stops early (``| head``) ends a command quietly, as it ends ``cat``; output
that cannot be written at all (``> /dev/full``, ``>&-``) is one line and exit 2; a Ctrl-C
while the command still loads is one line too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest


def test_a_closed_pipe_ends_the_command_quietly():
    # 0.7 MB of JSON: far more than a pipe holds, so the writer meets the closed end
    command = [sys.executable, "-m", "ccweave.cli", "topo", "show", "dgx-a100:128", "--json"]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout.read(1) == b"{"
    writer.stdout.close()  # as head does once it has its lines
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=60) == 141  # 128 + SIGPIPE, what a shell reports for cat
    assert err == ""


def _ccweave(*argv: str, stdout=subprocess.PIPE, shell_tail: str = "") -> subprocess.Popen:
    """``ccweave ARGV`` in a shell, so ``shell_tail`` can close a descriptor (``>&-``)."""
    script = f'exec "$@" {shell_tail}'
    return subprocess.Popen(["sh", "-c", script, "sh", sys.executable, "-m", "ccweave.cli",
                             *argv], stdout=stdout, stderr=subprocess.PIPE)


def test_a_table_to_a_reader_that_went_away_ends_quietly_too():
    """rich printed the table and, on the broken pipe, exited 1 by itself."""
    writer = _ccweave("topo", "show", "dgx1")
    writer.stdout.close()  # before a byte is read: `| head -c0`
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=60) == 141 and err == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["topo", "show", "dgx1"], ["topo", "show", "dgx1", "--json"],
                                  ["--help"]])
def test_output_that_cannot_be_written_is_one_line_and_exit_2(argv):
    """``> /dev/full`` was an OSError traceback (exit 1), and ``--help`` ended 0 with
    nothing written."""
    with open("/dev/full", "wb") as full:
        proc = _ccweave(*argv, stdout=full)
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 2, err
    assert err == ("ccweave: error: cannot write to standard output: No space left on "
                   "device; send it to a file or a pipe that takes it\n")


def test_no_standard_output_at_all_is_one_line_and_exit_2():
    """``>&-``: Python has no sys.stdout; it was an AttributeError traceback."""
    proc = _ccweave("topo", "show", "dgx1", stdout=None, shell_tail=">&-")
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 2
    assert err == ("ccweave: error: cannot write to standard output: it is closed; send it "
                   "to a file or a pipe that takes it\n")


def test_no_standard_error_still_ends_with_the_error_s_exit_code():
    """``2>&-``: the error has nowhere to go, and printing it raised (exit 1)."""
    proc = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-m",
                           "ccweave.cli", "topo", "show", "nope:3"], capture_output=True)
    assert proc.returncode == 2


def test_ctrl_c_while_the_command_still_loads_is_one_line():
    """The command's hook is in place before numpy and scipy load (``import ccweave``
    loads neither): a Ctrl-C in that second printed a KeyboardInterrupt traceback."""
    loads = subprocess.run([sys.executable, "-c", "import sys, ccweave; "
                            "print(sorted({'numpy', 'scipy'} & set(sys.modules)))"],
                           capture_output=True, text=True, check=True)
    assert loads.stdout.strip() == "[]"
    interrupted = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv = ['ccweave']; import ccweave.cli; "
         "raise KeyboardInterrupt"], capture_output=True, text=True)
    assert interrupted.stderr == "ccweave: interrupted\n"
    assert interrupted.returncode in (-signal.SIGINT, 130)
    library = subprocess.run([sys.executable, "-c", "import ccweave.cli; "
                              "raise KeyboardInterrupt"], capture_output=True, text=True)
    assert "Traceback" in library.stderr  # a program that imports ccweave keeps its own


def test_a_ctrl_c_python_swallows_while_the_command_loads_still_stops_it():
    """A Ctrl-C that lands in an import's weakref callback while the command still loads
    its modules is printed by Python as "Exception ignored" and lost: ``testbed up`` went
    on to build its testbed and exit 0. The command's start remembers it, says one line,
    and runs nothing."""
    script = ("import signal, sys, weakref; sys.argv = ['ccweave']; import ccweave.cli\n"
              "class Loading: pass\n"
              "lock = Loading()\n"
              "ref = weakref.ref(lock, lambda _: signal.raise_signal(signal.SIGINT))\n"
              "del lock  # the callback runs, its KeyboardInterrupt is ignored\n"
              "sys.exit(ccweave.cli.main(['topo', 'show', 'ring:4']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (130, "")
    assert done.stderr == "ccweave: interrupted (SIGINT)\n"
