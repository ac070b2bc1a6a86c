"""Hypothesis strategies shared by the tests: random topologies and random schedules."""

from __future__ import annotations

from hypothesis import strategies as st

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
def slow_port_switches(draw, min_ranks: int = 2, max_ranks: int = 6) -> Topology:
    """Ranks on one switch whose ports differ, some much slower and some faster one way
    than the other, plus a few one-way direct links: the machines where allreduce's
    RS + AG is not a bound."""
    n = draw(st.integers(min_ranks, max_ranks))
    speeds = st.sampled_from([2.0, 10.0, 25.0, 50.0, 100.0]).map(lambda b: b * GBPS)
    alpha = st.sampled_from([0.0, 0.5e-6, 1e-6, 3e-6])
    links: list[Link] = []
    for rank in range(n):
        up = draw(speeds)
        down = up if draw(st.booleans()) else draw(speeds)
        links.append(Link(rank, "sw", up, draw(alpha)))
        links.append(Link("sw", rank, down, draw(alpha)))
    for _ in range(draw(st.integers(0, 3))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if a != b:
            links.append(Link(a, b, draw(speeds), draw(alpha)))
    return Topology(f"slowport{n}", n, tuple(links), {"sw": NodeKind.SWITCH})
