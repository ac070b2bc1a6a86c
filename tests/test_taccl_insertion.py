"""The insertion ordering (``longest-remaining-insertion``): sends fill idle gaps, and its
schedules verify on TACCL's shipped sketches."""

from __future__ import annotations

import pytest

from ccweave.synth.taccl.ordering import Heuristic, Ordering
from ccweave.verify import verify
from tests.test_taccl_after_routing import taccl_case
from tests.test_taccl_heuristics import mesh_ordered


def _movable(lg, o: Ordering) -> list[int]:
    """Sends that, every other send kept where it is, could start earlier: from their
    chunk's arrival, an earlier span where their connection is idle for the whole send
    and each link of their route from the send's latency on."""
    held: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    for i, s in enumerate(o.sends):
        alpha = lg.edges[s.edge].alpha
        held.setdefault(("edge", s.edge), []).append((o.start[i], o.finish[i], i))
        for link in lg.edges[s.edge].route:
            held.setdefault(("link", link), []).append((o.start[i] + alpha, o.finish[i], i))
    movable = []
    for i, s in enumerate(o.sends):
        alpha = lg.edges[s.edge].alpha
        spans = [(("edge", s.edge), 0.0)] + [(("link", lk), alpha)
                                             for lk in lg.edges[s.edge].route]
        length = o.finish[i] - o.start[i]
        ready = o.finish[s.parent] if s.parent >= 0 else 0.0
        candidates = {ready} | {end - off for key, off in spans
                                for _, end, _ in held[key] if end - off >= ready}
        for t in sorted(candidates):
            if t >= o.start[i] - 1e-12:
                break
            if all(b <= t + off + 1e-12 or a >= t + off + length - (off if key[0] == "link"
                                                                   else 0.0) - 1e-12
                   for key, off in spans for a, b, j in held[key] if j != i):
                movable.append(i)
                break
    return movable


def test_insertion_leaves_no_gap_that_a_ready_send_fits():
    """Every send starts at the first span, after its chunk arrived, where all it holds is
    idle; TACCL's backward order (each send as late as it may) leaves such gaps."""
    lg, o = mesh_ordered(Heuristic.INSERTION)
    assert o.heuristic is Heuristic.INSERTION
    assert _movable(lg, o) == []
    lg, appended = mesh_ordered(Heuristic.BACKWARD)
    assert _movable(lg, appended)


@pytest.mark.parametrize("stem, machine", [("sk1-ndv2-n1", "ndv2"), ("sk1-dgx2-n1", "dgx2")])
def test_insertion_schedules_verify_on_shipped_sketches(stem, machine):
    schedule, topology, _ = taccl_case(stem, machine, ordering=Heuristic.INSERTION.value)
    verify(schedule, topology)
    assert schedule.metadata["taccl"]["ordering"]["heuristic"] == Heuristic.INSERTION.value
