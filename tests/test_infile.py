"""Input files are read once, whole, within a limit: an endless stream is refused instead of
filling the host's memory, a pipe or /dev/stdin is read once (readers that read twice hung
on a FIFO or found /dev/stdin empty), and every failure is one line naming the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ccweave.errors import InputError, LimitError
from ccweave.infile import read_bytes, read_text
from ccweave.synth import synthesize
from ccweave.topology import zoo

ROOT = Path(__file__).resolve().parents[1]


def test_an_endless_stream_is_refused_at_the_limit():
    with pytest.raises(LimitError, match=r"^/dev/zero: more .*over the limit of 1,048,576 "
                                         r"bytes of input"):
        read_bytes("/dev/zero", limit=1 << 20)


def test_a_regular_file_over_the_limit_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2000)
    with pytest.raises(LimitError, match="2,000 bytes, over the limit of 1,000"):
        read_bytes(path, limit=1000)


@pytest.mark.parametrize(("make", "says"), [
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.symlink_to(p.name), "a loop of symbolic links"),
    (lambda p: p.write_bytes(b'{"name": "\xff\xfe"}'), r"not UTF-8 text \(byte 10 is 0xff\)"),
])
def test_a_file_that_cannot_be_read_is_one_line_naming_it(tmp_path, make, says):
    path = tmp_path / "in.json"
    make(path)
    with pytest.raises(InputError, match=says) as caught:
        read_text(path, "give a topology file")
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)
    assert "(give a topology file)" in str(caught.value)


def test_a_byte_order_mark_is_dropped_and_a_flag_named(tmp_path):
    path = tmp_path / "in.json"
    path.write_bytes(b"\xef\xbb\xbf{}")
    assert read_text(path) == "{}"
    with pytest.raises(InputError, match=r"^--measured .*: no such file"):
        read_text(tmp_path / "none.txt", flag="--measured")


def _cli(*argv: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccweave.cli", *argv], input=stdin,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def test_msccl_xml_on_stdin_is_read_as_xml(tmp_path):
    """/dev/stdin has no suffix: its text decides (it was parsed as JSON)."""
    from ccweave.export import to_xml

    xml = to_xml(synthesize(zoo.get("switch:4"), "allgather", "ring"))
    for argv in (["verify", "/dev/stdin"], ["import", "/dev/stdin", "-o",
                                            str(tmp_path / "s.json")],
                 ["lint", "/dev/stdin", "--ignore-env"]):
        done = _cli(*argv, stdin=xml)
        assert done.returncode in (0, 1), (argv, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_fifo_is_read_once(tmp_path):
    """``export`` read a plan twice (to tell its kind, then to load it) and ``topo import``
    sniffed the format first: on a FIFO the second read waited for ever."""
    from ccweave import schedule as schedule_io

    text = json.dumps(schedule_io.to_dict(synthesize(zoo.get("switch:4"), "allgather",
                                                     "ring")))
    hwloc = (ROOT / "tests" / "fixtures" / "hwloc_4gpu_pcie.xml").read_text()
    for argv, content, out in ((["export"], text, "a.xml"),
                               (["topo", "import", "--gpu-fabric", "pcie-only"], hwloc,
                                "t.json")):
        fifo = tmp_path / f"in-{out.split('.')[0]}"  # no suffix: the text decides
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda f=fifo, c=content: f.write_text(c),
                                  daemon=True)
        writer.start()
        done = _cli(*argv, str(fifo), "-o", str(tmp_path / out), timeout=120)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / out).exists()
