"""Topologies from a profile: a flat one from measured pairs alone, or a base topology
(imported, from the zoo, hand-written) whose link figures measured ones replace."""

from __future__ import annotations

import statistics
from collections import defaultdict

from ccweave.errors import InputError
from ccweave.profile.result import Profile
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.units import format_size

ALIKE = 0.10
"""Pairs whose bandwidths all lie within this fraction of their median are "alike": the
flat topology joins the ranks through one switch instead of a full mesh."""
POOR_R2 = 0.95
"""Fits below this R^2 are flagged in reports."""
_TIE = 1e-9


def describe(profile: Profile) -> str:
    """One line on how the figures were measured, for a topology's ``source``."""
    sizes = profile.pairs[0].curve.sizes if profile.pairs else ()
    span = f"{format_size(sizes[0])}..{format_size(sizes[-1])}" if sizes else "no sizes"
    worst = min((p.curve.fit.r2 for p in profile.pairs), default=float("nan"))
    return (f"ccweave profile: {profile.backend} ping-pong over {span} between "
            f"{len(profile.pairs)} rank pairs, alpha-beta least squares (worst R^2 "
            f"{worst:.4f})" + (f"; {len(profile.copies)} CUDA copy paths" if profile.copies
                               else ""))


def warnings(profile: Profile) -> list[str]:
    """What a reader of the figures should know: negative alphas (taken as 0), poor fits."""
    found = []
    for label, f in [(f"rank {p.a} <-> {p.b}", p.curve.fit) for p in profile.pairs] + \
            [(f"rank {c.rank} {c.label}", c.curve.fit) for c in profile.copies]:
        if f.alpha < 0:
            found.append(f"{label}: fitted alpha {f.alpha * 1e6:.1f} us < 0 (times bend over "
                         "these sizes: a burst allowance or protocol switch); taken as 0")
        if f.r2 < POOR_R2:
            found.append(f"{label}: R^2 {f.r2:.3f}: times are noisy or not linear in size; "
                         "more --iters, a quieter machine, or a narrower --sizes range")
    return found


def local_bandwidth(profile: Profile, default: float = 1e12) -> float:
    """The slowest rank's D2D copy figure, or ``default`` when no GPU was profiled."""
    figures = [c.curve.fit.bandwidth for c in profile.copies if c.path == "d2d"]
    return min(figures) if figures else default


def flat(profile: Profile, name: str = "profiled", alike: float = ALIKE) -> Topology:
    """Ranks joined as measured: through one ``switch`` when there are three or more and
    every pair is alike (each rank's link gets the median bandwidth and half the median
    alpha, so a route through the switch costs what was measured), else a full mesh with
    each pair's own figures both ways."""
    if profile.world_size < 2 or not profile.pairs:
        raise InputError("a profile needs at least two ranks to build a topology")
    missing = [(a, b) for a in range(profile.world_size) for b in range(a + 1,
                                                                          profile.world_size)
               if profile.pair(a, b) is None]
    if missing:
        raise InputError(f"the profile lacks rank pairs {missing[:4]}; profile again")
    fits = [p.curve.fit for p in profile.pairs]
    median_bw = statistics.median(f.bandwidth for f in fits)
    links: list[Link] = []
    fabric: dict[str, NodeKind] = {}
    if profile.world_size >= 3 and all(abs(f.bandwidth / median_bw - 1) <= alike
                                       for f in fits):
        alpha = max(statistics.median(f.alpha for f in fits), 0.0) / 2
        fabric["switch"] = NodeKind.SWITCH
        for rank in range(profile.world_size):
            links += [Link(rank, "switch", median_bw, alpha, "profiled"),
                      Link("switch", rank, median_bw, alpha, "profiled")]
    else:
        for pair in profile.pairs:
            f = pair.curve.fit
            alpha = max(f.alpha, 0.0)
            links += [Link(pair.a, pair.b, f.bandwidth, alpha, "profiled"),
                      Link(pair.b, pair.a, f.bandwidth, alpha, "profiled")]
    groups = {"node": profile.nodes} if profile.nodes else {}
    return Topology(name, profile.world_size, tuple(links), fabric, groups,
                    local_bandwidth(profile), describe(profile))


def override(base: Topology, profile: Profile, name: str | None = None) -> Topology:
    """``base`` with measured figures: its structure, routes and groups kept.

    Each measured pair follows its cheapest route in ``base``. A link that is a
    bottleneck (the slowest) of some measured route gets the fastest bandwidth measured
    over such routes; a link that never limits a measured route keeps its figure unless a
    measurement shows it faster. Alphas are scaled so each route's sum matches what was
    measured (the median scale of the routes through a link). CUDA copies set
    ``local_bandwidth`` (D2D) and the rank's one PCIe/CPU uplink (H2D in, D2H out).
    Links no measurement crosses keep their figures.
    """
    if base.num_ranks != profile.world_size:
        raise InputError(f"--base {base.name!r} has {base.num_ranks} ranks but the profile "
                         f"measured {profile.world_size}; profile with as many ranks")
    limits: dict[int, list[float]] = defaultdict(list)
    passes: dict[int, list[float]] = defaultdict(list)
    scales: dict[int, list[float]] = defaultdict(list)
    shares: dict[int, list[float]] = defaultdict(list)
    for pair in profile.pairs:
        f = pair.curve.fit
        for src, dst in ((pair.a, pair.b), (pair.b, pair.a)):
            if not base.has_route(src, dst):
                continue
            route = base.route(src, dst)
            slowest = min(base.links[i].bandwidth for i in route)
            base_alpha = sum(base.links[i].alpha for i in route)
            for i in route:
                if base.links[i].bandwidth <= slowest * (1 + _TIE):
                    limits[i].append(f.bandwidth)
                else:
                    passes[i].append(f.bandwidth)
                if base_alpha > 0:
                    scales[i].append(f.alpha / base_alpha)
                else:
                    shares[i].append(f.alpha / len(route))
    links = []
    for number, link in enumerate(base.links):
        bandwidth = link.bandwidth
        if limits[number]:
            bandwidth = max(limits[number])
        elif passes[number]:
            bandwidth = max(bandwidth, max(passes[number]))
        alpha = link.alpha
        if scales[number]:
            alpha = link.alpha * statistics.median(scales[number])
        elif shares[number]:
            alpha = statistics.median(shares[number])
        links.append(Link(link.src, link.dst, bandwidth, max(alpha, 0.0), link.kind))
    _uplinks(base, profile, links)
    return Topology(name or base.name, base.num_ranks, tuple(links), base.fabric, base.groups,
                    local_bandwidth(profile, base.local_bandwidth),
                    f"{base.name} ({base.source}) with figures measured by {describe(profile)}")


def _uplinks(base: Topology, profile: Profile, links: list[Link]) -> None:
    """H2D/D2H figures onto each rank's single link to a PCIe switch or CPU (in place)."""
    host_kinds = (NodeKind.PCIE, NodeKind.CPU)
    for copy in profile.copies:
        if copy.path not in ("h2d", "d2h"):
            continue
        rank = copy.rank
        if copy.path == "d2h":
            found = [i for i, lk in enumerate(links)
                     if lk.src == rank and not base.is_rank(lk.dst)
                     and base.kind(lk.dst) in host_kinds]
        else:
            found = [i for i, lk in enumerate(links)
                     if lk.dst == rank and not base.is_rank(lk.src)
                     and base.kind(lk.src) in host_kinds]
        if len(found) == 1:
            old = links[found[0]]
            links[found[0]] = Link(old.src, old.dst, copy.curve.fit.bandwidth, old.alpha,
                                   old.kind)
