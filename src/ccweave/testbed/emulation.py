"""How a Topology becomes an emulated network on one host: a pure plan, no side effects.

Every node gets a network namespace: a rank's namespace holds one process, a fabric
node's (switch, NIC, PCIe switch, CPU) only forwards. Every pair of nodes joined by a
link gets one veth pair; each end shapes its egress with a token bucket (``tc tbf``) at
the directed link's bandwidth times :attr:`Emulation.scale`, so ``a -> b`` and
``b -> a`` are separate resources, as in the model. Routes are host routes (and, where
two sources' routes through a fabric node part ways, source rules) that send each
ordered pair of ranks along the links ``Topology.route`` names, never through a third
rank (pairs the model cannot route, which no schedule sends between, go through ranks so
that start-up connections work). Neighbour entries are static (every MAC is chosen
here), so nothing depends on ARP.

The host shapes at most ``max_rate_mbit`` per link: a machine with faster links is
emulated with every bandwidth multiplied by ``scale`` (< 1), so it runs ``1/scale``
times slower, and a time measured on the emulation is multiplied by ``scale`` to give
the machine's (:meth:`Emulation.to_machine_time`).
Latency (``alpha``) is not emulated: this host's tc has no netem. The emulated links
have the host's own latency, which ``ccweave profile`` measures.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from ccweave.errors import InputError
from ccweave.topology.model import Link, Node, NodeKind, Topology

DEFAULT_MAX_RATE_MBIT = 400.0
"""The fastest link the emulation shapes: 8 ranks of a 2-core host move about that much
each at once (faster links are scaled down, every figure scaled back)."""
MIN_RATE_MBIT = 1.0
"""Slower links than this (after scaling) are not shaped faithfully by tbf."""
MTU = 9000
"""veth MTU: large frames cut the per-packet CPU cost of forwarding and shaping."""
MAX_NAMESPACES = 1000
"""The most namespaces a testbed may ever have (``--max-namespaces`` included)."""
DEFAULT_MAX_NAMESPACES = 128
"""Namespaces a testbed may make unless asked for more (``--max-namespaces``): each
costs the build time of its routes (a star of N ranks has N^2; 257 namespaces took 4 s
on an idle 2-core host, 513 took minutes on a loaded one), and a rank in each needs a
process of a few hundred MB."""
PREFIX = "ccw"
"""Every namespace and root-namespace device a testbed makes starts with this (a name
alone proves nothing: see :mod:`ccweave.testbed.records`)."""
QUEUE_S = 0.1
"""A rank's or a switch's port queues at most this many seconds of its rate. A rank's
TCP sits on its own queue and backs off when it fills; at a switch TCP sees loss, as on a
real network, and a deeper queue there only fills up (1 s at every fabric port: the rail
machine's 16 MB allreduce took 593 ms, against 516-527 ms in six benches at 100 ms)."""
HOST_QUEUE_S = 0.2
"""The ports of a host's own fabric (NIC, CPU, PCIe switch) queue this much. Shared by a
host's ranks, they carry many flows at once. Under reno every flow's window grows until
it loses a packet, so a queue there fills and drops whatever its depth; what the depth
decides is how long a loss costs, since the retransmission timer and tail-loss probe
scale with the round trip the queue makes. The shared NIC's 64 MB trees allgather (`ss`
counted 120 connections a rank), benches of five rounds: six at 1 s, 0-2127 drops and
rounds of 6.7-7.1 s in two of them (2.7-3.2 s otherwise); at 300 ms, one round of 3.4 s;
at 200 ms 2295 drops, rounds 2.74-2.83 s; at 100 ms 3976 drops, 2.72-2.77 s. A few flows
lose more at a shallow queue: hierarchical(6, 18)'s 16 MB allgather took a median 0.69 s
at 1 s, 0.72 s at 200 ms and 0.72-0.75 s at 100 ms (trees 0.68, 0.69, 0.71). (At 100 ms
under BBR, which the testbed used before reno, the same trees allgather dropped 1734
packets and took 2.9-4.5 s.)"""


@dataclass(frozen=True)
class Port:
    """One end of a veth pair: ``device`` in ``node``'s namespace, shaping its egress at
    ``rate_bps`` bytes/second of payload (``None``: unshaped, no link in that direction)
    behind a queue of ``queue_s`` seconds of that rate."""

    node: Node
    device: str
    mac: str
    rate_bps: float | None
    queue_s: float = QUEUE_S


@dataclass(frozen=True)
class Wire:
    """A veth pair between two nodes: the links ``a -> b`` and ``b -> a``."""

    a: Port
    b: Port


@dataclass(frozen=True)
class Route:
    """In ``node``'s namespace, packets for rank ``dst`` leave through ``device`` (whose
    far end has ``next_mac``); only those from rank ``src`` when ``src`` is set."""

    node: Node
    dst: int
    device: str
    next_mac: str
    src: int | None = None


@dataclass(frozen=True)
class Hop:
    """In ``node``'s namespace, packets for ``address`` leave through ``device`` (whose far
    end has ``next_mac``)."""

    node: Node
    address: str
    device: str
    next_mac: str


@dataclass(frozen=True)
class PinnedRoute:
    """A pinned route ``src -> via... -> dst`` made real: a socket bound to
    ``src_address`` and connected to ``dst_address`` takes exactly its links (``hops``),
    its acknowledgements the links back (``back``)."""

    src: int
    dst: int
    via: tuple[str, ...]
    src_address: str
    dst_address: str
    hops: tuple[Hop, ...]
    back: tuple[Hop, ...]

    def to_dict(self) -> dict[str, object]:
        """What a rank's transport reads (``CCWEAVE_ROUTES``)."""
        return {"src": self.src, "dst": self.dst, "via": list(self.via),
                "src_address": self.src_address, "dst_address": self.dst_address}


@dataclass(frozen=True)
class Emulation:
    """The network namespaces, veths, shaping and routes that emulate ``topology``.

    ``scale`` multiplies every link's bandwidth (1.0 when the machine is slow enough to
    shape as it is); ``tag`` prefixes every namespace (``ccw<tag>...``); ranks have
    addresses in ``10.<subnet>.0.0/16``.
    """

    topology: Topology
    scale: float
    tag: str
    subnet: int
    wires: tuple[Wire, ...]
    routes: tuple[Route, ...]
    relays: frozenset[int] = frozenset()
    """Ranks that forward packets of pairs the model has no route for (a ring's distant
    ranks: gloo and MPI connect every pair at start-up, schedules never send there)."""
    pinned: tuple[PinnedRoute, ...] = ()
    """Routes schedules pin (``Transfer.via``), each with addresses of its own."""
    max_rate_mbit: float = DEFAULT_MAX_RATE_MBIT
    """The fastest link the host was asked to shape (what gave :attr:`scale`)."""

    @cached_property
    def _node_names(self) -> dict[Node, str]:
        names: dict[Node, str] = {rank: f"{PREFIX}{self.tag}r{rank}"
                                  for rank in self.topology.ranks}
        for number, fabric in enumerate(self.topology.fabric):
            names[fabric] = f"{PREFIX}{self.tag}f{number}"
        return names

    def namespace(self, node: Node) -> str:
        """The namespace of a rank or fabric node."""
        return self._node_names[node]

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace: the ranks' first, then the fabric's."""
        return tuple(self._node_names.values())

    def address(self, rank: int) -> str:
        """Rank ``rank``'s IPv4 address (the same /32 on each of its devices)."""
        return rank_address(self.subnet, rank)

    def devices(self, node: Node) -> tuple[str, ...]:
        """The node's veth devices, in wire order."""
        return tuple(port.device for wire in self.wires for port in (wire.a, wire.b)
                     if port.node == node)

    def data_device(self, rank: int) -> str:
        """The device a process binds to (gloo's ``GLOO_SOCKET_IFNAME``, Open MPI's
        ``btl_tcp_if_include``): any of the rank's, since they carry the same address
        and host routes pick the link."""
        return self.devices(rank)[0]

    def emulated_topology(self) -> Topology:
        """The machine the testbed really is: every bandwidth times :attr:`scale`, no
        link latency (the host's own latency is what the emulation has, and what a
        calibrated cost model measures)."""
        topo = self.topology
        links = tuple(Link(lk.src, lk.dst, lk.bandwidth * self.scale, 0.0, lk.kind)
                      for lk in topo.links)
        return Topology(f"{topo.name} (emulated)", topo.num_ranks, links, topo.fabric,
                        topo.groups, topo.local_bandwidth, f"netns emulation of {topo.name}"
                        f" at x{self.scale:.4g} bandwidth", topo.cost)

    def to_machine_time(self, emulated_s: float) -> float:
        """A time measured on the emulation, as the emulated machine would take it."""
        return emulated_s * self.scale

    def describe(self) -> str:
        topo = self.topology
        shaped = sum(port.rate_bps is not None for w in self.wires for port in (w.a, w.b))
        text = (f"{topo.name}: {topo.num_ranks} rank and {len(topo.fabric)} fabric "
                f"namespaces, {len(self.wires)} veth pairs ({shaped} shaped directions)")
        if self.relays:
            text += (f"; ranks {sorted(self.relays)} forward start-up traffic between "
                     "ranks the model cannot route")
        if self.scale != 1.0:
            text += (f", bandwidths x{self.scale:.4g} (reported times are scaled back by "
                     "the same factor)")
        return text


def rank_address(subnet: int, rank: int) -> str:
    return f"10.{subnet}.{rank // 250}.{rank % 250 + 1}"


def scale_for(topology: Topology, max_rate_mbit: float = DEFAULT_MAX_RATE_MBIT) -> float:
    """The factor that brings the fastest link down to ``max_rate_mbit`` (1.0 if it is
    already as slow)."""
    if not max_rate_mbit > 0:
        raise InputError(f"max rate {max_rate_mbit!r} Mbit/s: give a positive rate")
    fastest = max((link.bandwidth for link in topology.links), default=0.0)
    top = max_rate_mbit * 1e6 / 8
    return min(1.0, top / fastest) if fastest else 1.0


def emulate(topology: Topology, *, max_rate_mbit: float = DEFAULT_MAX_RATE_MBIT,
            tag: str = "0", subnet: int = 100,
            pinned: Iterable[tuple[int, int, tuple[str, ...]]] = ()) -> Emulation:
    """Plan the emulation of ``topology`` (see the module docstring).

    ``pinned`` lists the routes ``(src, dst, via)`` schedules pin (multipath stripes):
    each gets an address at both ends whose packets take exactly those links, so a
    transport that binds and connects to them sends over that path (a second rail, the
    host path) instead of the pair's usual one. They are numbered in the order given, so
    adding routes at the end keeps the earlier ones' addresses.

    Raises ``InputError`` when the machine cannot be emulated faithfully: fewer than two
    ranks, too many nodes, or links so much slower than the fastest that, scaled, they
    fall under :data:`MIN_RATE_MBIT`.
    """
    if topology.num_ranks < 2:
        raise InputError(f"topology {topology.name!r} has one rank: nothing to emulate")
    nodes = len(topology.nodes)
    if nodes > MAX_NAMESPACES:
        raise InputError(f"topology {topology.name!r} has {nodes} nodes; the testbed makes one "
                         f"namespace per node and holds at most {MAX_NAMESPACES}")
    if not 0 <= subnet <= 255:
        raise InputError(f"subnet {subnet}: the second octet of 10.x.0.0/16 is 0..255")
    topology.check_connected()
    scale = scale_for(topology, max_rate_mbit)
    slowest = min(topology.links, key=lambda link: link.bandwidth)
    if slowest.bandwidth * scale * 8 / 1e6 < MIN_RATE_MBIT:
        raise InputError(
            f"topology {topology.name!r}: link {slowest.src} -> {slowest.dst} would run at "
            f"{slowest.bandwidth * scale * 8 / 1e6:.3g} Mbit/s once the fastest link is "
            f"scaled to {max_rate_mbit:g} Mbit/s; tbf cannot shape under "
            f"{MIN_RATE_MBIT:g} Mbit/s: raise --max-rate or emulate fewer kinds of links")
    index = topology.node_index
    wires: dict[frozenset, Wire] = {}
    ends: dict[tuple[Node, Node], Port] = {}  # (node, far node) -> node's end
    for link in topology.links:
        key = frozenset((link.src, link.dst))
        if key in wires:
            continue
        a, b = sorted((link.src, link.dst), key=index.__getitem__)
        number = len(wires)
        ports = []
        for here, there, side in ((a, b, 1), (b, a, 2)):
            back = topology.link(here, there)
            rate = back.bandwidth * scale if back is not None else None
            shallow = topology.is_rank(here) or topology.kind(here) is NodeKind.SWITCH
            queue = QUEUE_S if shallow else HOST_QUEUE_S
            ports.append(Port(here, f"n{index[there]}", _mac(number, side), rate, queue))
        wires[key] = Wire(*ports)
        ends[a, b], ends[b, a] = ports
    routes, relays = _routes(topology, ends)
    made = tuple(_pin(topology, ends, subnet, number, route)
                 for number, route in enumerate(dict.fromkeys(
                     (int(s), int(d), tuple(v)) for s, d, v in pinned)))
    return Emulation(topology, scale, tag, subnet, tuple(wires.values()), routes, relays,
                     made, max_rate_mbit)


def _pin(topology: Topology, ends: dict[tuple[Node, Node], Port], subnet: int,
         number: int, route: tuple[int, int, tuple[str, ...]]) -> PinnedRoute:
    """Addresses ``10.<subnet>.128+.x`` for the two ends of pinned route ``number`` and the
    hops that take its packets along it (and back along the reversed links, or the
    pair's usual route back where a link has no reverse)."""
    src, dst, via = route
    links = [(topology.links[i].src, topology.links[i].dst)
             for i in topology.route_via(src, dst, tuple(via))]
    here, there = (_pin_address(subnet, 2 * number + k) for k in (0, 1))
    back_links = [(b, a) for a, b in reversed(links)]
    if any(topology.link(a, b) is None for a, b in back_links):
        back_links = [(topology.links[i].src, topology.links[i].dst)
                      for i in topology.route(dst, src)]

    def hops(path: list[tuple[Node, Node]], address: str) -> tuple[Hop, ...]:
        return tuple(Hop(a, address, ends[a, b].device, ends[b, a].mac) for a, b in path)

    return PinnedRoute(src, dst, tuple(via), here, there, hops(links, there),
                       hops(back_links, here))


def _pin_address(subnet: int, number: int) -> str:
    if number >= 120 * 250:
        raise InputError("a testbed holds at most 15,000 pinned routes")
    return f"10.{subnet}.{128 + number // 250}.{number % 250 + 1}"

def _paths(topology: Topology) -> Iterator[tuple[int, int, list[tuple[Node, Node]]]]:
    """(src, dst, links) for every ordered pair: the model's route, or, where the model
    has none (a ring's distant ranks), the fastest path through relaying ranks."""
    graph = None
    for src in topology.ranks:
        for dst in topology.ranks:
            if src == dst:
                continue
            if topology.has_route(src, dst):
                yield src, dst, [(topology.links[i].src, topology.links[i].dst)
                                 for i in topology.route(src, dst)]
                continue
            if graph is None:
                import networkx as nx

                graph = topology.to_networkx()
                for _, _, data in graph.edges(data=True):
                    data["cost"] = 1.0 / data["bandwidth"]
            nodes = nx.shortest_path(graph, src, dst, weight="cost")
            yield src, dst, list(itertools.pairwise(nodes))


def _routes(topology: Topology, ends: dict[tuple[Node, Node], Port]
            ) -> tuple[tuple[Route, ...], frozenset[int]]:
    """Host routes per node along each pair's path (:func:`_paths`); where a node must
    send one destination's packets out of different devices by source, the most common
    device is the plain route and the others are source rules. Also the ranks that
    forward for pairs the model cannot route."""
    hops: dict[Node, dict[int, dict[int, tuple[str, str]]]] = defaultdict(
        lambda: defaultdict(dict))  # node -> dst -> src -> (device, next mac)
    relays: set[int] = set()
    for src, dst, path in _paths(topology):
        for here, there in path:
            if here != src and isinstance(here, int):
                relays.add(here)
            port, far = ends[here, there], ends[there, here]
            hops[here][dst][src] = (port.device, far.mac)
    routes = []
    for node, by_dst in hops.items():
        for dst, by_src in sorted(by_dst.items()):
            common, _ = Counter(by_src.values()).most_common(1)[0]
            routes.append(Route(node, dst, *common))
            routes += [Route(node, dst, device, mac, src)
                       for src, (device, mac) in sorted(by_src.items())
                       if (device, mac) != common]
    return tuple(routes), frozenset(relays)


def _mac(wire: int, side: int) -> str:
    """A locally administered unicast MAC, unique per wire end."""
    octets = [0x02, 0xCC, (wire >> 16) & 0xFF, (wire >> 8) & 0xFF, wire & 0xFF, side]
    return ":".join(f"{octet:02x}" for octet in octets)


def free_subnet(used: set[str], start: int = 100) -> int:
    """A second octet ``x`` such that ``10.x.0.0/16`` overlaps none of ``used`` (CIDR
    strings of the host's addresses)."""
    taken = [ipaddress.ip_network(cidr, strict=False) for cidr in used]
    for x in [*range(start, 250), *range(16, start)]:
        candidate = ipaddress.ip_network(f"10.{x}.0.0/16")
        if not any(candidate.overlaps(net) for net in taken if net.version == 4):
            return x
    raise InputError("no free 10.x.0.0/16 network for the testbed on this host")
