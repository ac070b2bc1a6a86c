"""A reader that stops early (``| head``) ends a command quietly, as it ends ``cat``."""

from __future__ import annotations

import subprocess
import sys


def test_a_closed_pipe_ends_the_command_quietly():
    # 0.7 MB of JSON: far more than a pipe holds, so the writer meets the closed end
    command = [sys.executable, "-m", "ccweave.cli", "topo", "show", "dgx-a100:128", "--json"]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout.read(1) == b"{"
    writer.stdout.close()  # as head does once it has its lines
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=60) == 141  # 128 + SIGPIPE, what a shell reports for cat
    assert err == ""
