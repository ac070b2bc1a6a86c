"""The incumbents `ccweave bench` compares with: gloo's and Open MPI's own collectives
run on ccweave's buffers and are checked element by element like a schedule."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("torch")

from ccweave.collectives import Collective, Kind
from ccweave.runtime.batch import Case, launch
from ccweave.runtime.native import NATIVE_KINDS, native_name

KINDS = sorted(NATIVE_KINDS, key=lambda kind: kind.value)


def cases(root: int = 1) -> list[Case]:
    return [Case(kind.value, None, (4096, 40960), modes=(False,), reps=2,
                 native=Collective(kind, 4, root=root if kind.is_rooted else 0))
            for kind in KINDS]


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_every_native_collective_gives_the_right_elements(backend, tmp_path):
    if backend == "mpi" and shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    rows = launch(cases(), 4, tmp_path, backend=backend)
    assert len(rows) == 2 * len(KINDS)
    for row in rows:
        mode = row["out_of_place"]
        assert mode["wrong"] == 0, row
        assert mode["time_us"] > 0
        assert row["schedule"] == native_name(backend, Kind.parse(row["case"]))
        assert row["in_place"]["skipped"] == "native"


def test_a_case_is_a_schedule_or_a_native_collective():
    from ccweave.errors import InputError

    with pytest.raises(InputError, match="schedule or a native"):
        Case("neither", None, (1024,))
