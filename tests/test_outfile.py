"""Writing output files: atomically (a failed write keeps the old file), never over an
input, saying when a file is replaced, and one line naming the path and the fix when it
cannot be written."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess

import pytest

from ccweave import outfile
from ccweave.cli import main
from ccweave.errors import InputError


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str, *words: str) -> None:
    assert err.startswith("ccweave: error:") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


def test_a_write_that_fails_half_way_keeps_the_old_file(tmp_path):
    target = tmp_path / "sched.json"
    target.write_text("the old, good content")

    def full_disk(temp):
        temp.write_text("half of the new")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(InputError, match=r"no space left.*unchanged"):
        outfile.write_with(target, full_disk)
    assert target.read_text() == "the old, good content"
    assert os.listdir(tmp_path) == ["sched.json"]  # no temporary left behind


def test_a_write_replaces_the_file_whole_keeping_its_mode_and_links(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    outfile.write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


def test_dev_full_is_one_line(capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    code, _, err = run(capsys, "synth", "ring:4", "allgather", "-o", "/dev/full")
    assert code == 2
    one_line_error(err, "/dev/full", "no space left")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # still the device, not a file


@pytest.mark.parametrize(("output", "words"), [
    ("missing/dir/x.json", ["no such directory", "create it first"]),
    (".", ["is a directory"]),
    ("", ["-o ''", "give a file name"]),
])
def test_output_paths_that_cannot_be_written(tmp_path, capsys, monkeypatch, output, words):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "synth", "ring:4", "allgather", "-o", output)
    assert code == 2
    one_line_error(err, *words)
    assert os.listdir(tmp_path) == []


def test_export_to_an_empty_name_does_not_write_into_the_current_directory(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "synth", "ring:4", "allgather", "-o", "s.json")[0] == 0
    code, _, err = run(capsys, "export", "s.json", "-o", "")
    assert code == 2
    one_line_error(err, "-o ''")
    assert os.listdir(tmp_path) == ["s.json"]


@pytest.mark.parametrize(("code", "words"), [
    (errno.EROFS, ["read-only", "write somewhere else"]),
    (errno.EPERM, ["immutable", "write somewhere else"]),
    (errno.EACCES, ["not writable", "write somewhere else"]),
])
def test_refused_renames_are_one_line(tmp_path, capsys, monkeypatch, code, words):
    # as root, permissions never refuse; the kernel's answer is what is translated
    def refuse(*_args):
        raise OSError(code, os.strerror(code))

    target = tmp_path / "s.json"
    target.write_text("old")
    monkeypatch.setattr(os, "replace", refuse)
    status, _, err = run(capsys, "synth", "ring:4", "allgather", "-o", str(target))
    assert status == 2
    one_line_error(err, str(target), *words)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["s.json"]


def test_an_immutable_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "s.json"
    target.write_text("old")
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(target)], capture_output=True,
                                        check=False).returncode != 0:
        pytest.skip("cannot make a file immutable here (chattr +i)")
    try:
        code, _, err = run(capsys, "synth", "ring:4", "allgather", "-o", str(target))
    finally:
        subprocess.run([chattr, "-i", str(target)], check=False)
    assert code == 2
    one_line_error(err, str(target), "write somewhere else")
    assert target.read_text() == "old"


def test_import_refuses_to_overwrite_its_input(tmp_path, capsys):
    sched, xml = tmp_path / "s.json", tmp_path / "a.xml"
    assert run(capsys, "synth", "switch:4", "allgather", "-o", str(sched))[0] == 0
    assert run(capsys, "export", str(sched), "-o", str(xml))[0] == 0
    before = xml.read_text()
    code, _, err = run(capsys, "import", str(xml), "-o", str(xml))
    assert code == 2
    one_line_error(err, "is the input", "write to another file")
    assert xml.read_text() == before


@pytest.mark.parametrize("argv", [
    ["topo", "show", "{topo}", "--plot", "{topo}"],
    ["synth", "{topo}", "allgather", "-o", "{topo}"],
    ["p2p", "{topo}", "0", "1", "-o", "{topo}"],
    ["profile", "--load", "{topo}", "-o", "{topo}"],
])
def test_no_command_writes_over_its_input(tmp_path, capsys, argv):
    topo = tmp_path / "t.json"
    topo.write_text(json.dumps({"ranks": 2, "links": [{"src": 0, "dst": 1, "bw_GBps": 1,
                                                       "duplex": True}]}))
    before = topo.read_text()
    code, _, err = run(capsys, *(a.format(topo=topo) for a in argv))
    assert code == 2
    one_line_error(err, "is the input")
    assert topo.read_text() == before


def test_replacing_a_file_is_said(tmp_path, capsys):
    sched, xml = tmp_path / "s.json", tmp_path / "a.xml"
    code, out, _ = run(capsys, "synth", "switch:4", "allgather", "-o", str(sched))
    assert code == 0 and f"wrote {sched}" in out
    code, out, _ = run(capsys, "synth", "switch:4", "allgather", "-o", str(sched))
    assert code == 0 and f"replaced {sched}" in out
    assert run(capsys, "export", str(sched), "-o", str(xml))[1].startswith(f"wrote {xml}")
    code, out, _ = run(capsys, "export", str(sched), "-o", str(xml))
    assert code == 0 and out.startswith(f"replaced {xml}")
    code, out, _ = run(capsys, "export", str(sched), "-o", str(xml), "--json")
    assert json.loads(out)["files"][0]["replaced"] is True
    code, out, _ = run(capsys, "synth", "switch:4", "allgather", "-o", str(sched), "--json")
    assert json.loads(out)["replaced"] is True
