"""Commands that run nothing (topo, synth, verify, simulate, compare, bounds, export,
import) start without torch or mpi4py: torch alone is about 320 MB and seconds of start
under load. Each command runs once, in order, in one fresh interpreter (a module loaded
by one stays loaded), and the first that loads either is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"

SCRIPT = """
import contextlib, io, json, sys
from ccweave.cli import main

loaded = {}
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(argv)
    heavy = [name for name in ("torch", "mpi4py") if name in sys.modules]
    print(json.dumps({"argv": argv, "code": code, "heavy": heavy, "out": out.getvalue()[-400:]}))
"""


def test_commands_that_run_nothing_do_not_import_torch(tmp_path):
    sched, xml = str(tmp_path / "s.json"), str(tmp_path / "a.xml")
    commands = [
        ["topo", "show", "dgx1"],
        ["topo", "import", str(FIXTURES / "nvidia_smi_topo_dgx1.txt"), "--gpu", "v100",
         "-o", str(tmp_path / "t.json")],
        ["synth", "ring:4", "allgather", "-o", sched],
        ["verify", sched],
        ["simulate", sched, "ring:4", "--sizes", "1MB"],
        ["compare", "ring:4", "allgather", "--sizes", "1MB", "--strategies", "ring,trees"],
        ["bounds", "ring:4", "allgather", "--sizes", "1MB"],
        ["export", sched, "-o", xml],
        ["import", xml, "-o", str(tmp_path / "b.json")],
    ]
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(commands)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["argv"] for row in rows] == commands
    for row in rows:
        assert row["code"] == 0, row
        assert not row["heavy"], f"ccweave {' '.join(row['argv'][:2])} loaded {row['heavy']}"
