"""Hypothesis strategies shared by the tests: random topologies and random schedules."""

from __future__ import annotations

from hypothesis import strategies as st

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.topology.model import Link, NodeKind, Topology

GBPS = 1e9


@st.composite
def topologies(draw, min_ranks: int = 2, max_ranks: int = 8, switches: bool = True,
               max_extra_links: int = 12) -> Topology:
    """A random strongly connected topology: a ring over the ranks (so every rank reaches
    every other), optional switches with some ranks attached, and extra random links."""
    n = draw(st.integers(min_ranks, max_ranks))
    bandwidth = st.sampled_from([5.0, 12.5, 25.0, 50.0, 100.0]).map(lambda b: b * GBPS)
    alpha = st.sampled_from([0.0, 0.3e-6, 0.7e-6, 2.6e-6])
    links: list[Link] = []

    def duplex(a, b):
        bw, al = draw(bandwidth), draw(alpha)
        links.append(Link(a, b, bw, al))
        links.append(Link(b, a, bw, al))

    order = draw(st.permutations(list(range(n))))
    for i in range(n):
        if n > 1 and (n > 2 or i == 0):
            duplex(order[i], order[(i + 1) % n])
    fabric: dict[str, NodeKind] = {}
    if switches and n > 2:
        for s in range(draw(st.integers(0, 2))):
            name = f"sw{s}"
            fabric[name] = NodeKind.SWITCH
            members = draw(st.sets(st.integers(0, n - 1), min_size=2, max_size=n))
            for rank in sorted(members):
                duplex(rank, name)
    for _ in range(draw(st.integers(0, max_extra_links))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if a != b:
            links.append(Link(a, b, draw(bandwidth), draw(alpha)))
    return Topology(f"random{n}", n, tuple(links), fabric)


@st.composite
def topology_and_schedule(draw) -> tuple[Topology, Schedule]:
    """A random topology and a random schedule over pairs that have routes; the builder
    derives deps from the slots the transfers share, plus a few explicit ones."""
    topo = draw(topologies(max_ranks=6))
    n = topo.num_ranks
    pairs = [(a, b) for a in range(n) for b in range(n) if topo.has_route(a, b)]
    builder = ScheduleBuilder(Collective(Kind.ALLTOALL, n, 2))
    slots = 2 * n
    for _ in range(draw(st.integers(1, 24))):
        src, dst = draw(st.sampled_from(pairs))
        count = draw(st.integers(1, 3))
        src_slot = (draw(st.sampled_from([Buffer.INPUT, Buffer.SCRATCH])),
                    draw(st.integers(0, slots - count)))
        dst_slot = (draw(st.sampled_from([Buffer.OUTPUT, Buffer.SCRATCH])),
                    draw(st.integers(0, slots - count)))
        before = len(builder.transfers)
        after = draw(st.lists(st.integers(0, before - 1), max_size=2)) if before else []
        op = draw(st.sampled_from([builder.copy, builder.reduce]))
        op(src, dst, src_slot, dst_slot, count, after=after)
    return topo, builder.build("random")
