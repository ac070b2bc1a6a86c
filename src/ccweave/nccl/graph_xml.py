"""ccweave's intra-node rings and trees as NCCL's graph XML (``NCCL_GRAPH_FILE``), and NCCL's
own graphs read back from its dump (``NCCL_GRAPH_DUMP_FILE``).

NCCL reads the file in ``ncclTopoCompute`` (``src/graph/search.cc``) instead of searching:
``<graphs version="1">`` holds one ``<graph>`` per pattern it should take from the file
(``id`` 0 the rings, 1 the trees), with ``pattern``, ``crossnic``, ``nchannels``,
``speedintra``, ``speedinter``, ``latencyinter``, ``typeintra``, ``typeinter`` and
``samechannels``; each ``<channel>`` lists its GPUs in order as ``<gpu dev=... rank=.../>``
(and, across nodes, the ``<net dev=...>`` it enters and leaves by). The parser is NCCL's
own (``src/graph/xml.cc``): no XML declaration, attribute values in quotes, elements as
NCCL's dump writes them.

:func:`write` gives the rings :func:`ccweave.synth.rings.find_rings` finds on the node
(ccweave's ring strategy's rings) as NCCL's ring channels, and the same orders as the
tree's chains (NCCL's tree inside a node is a chain of its GPUs). NCCL splits a
collective evenly over its channels, so a ring ccweave gives twice another's bandwidth
is listed twice. Limits: one node only (a multi-node graph must name each channel's NICs
by NCCL's network device ids, which ccweave does not know); local rank ``i`` is CUDA device
``i``; the speeds are in NCCL's figures (:mod:`ccweave.nccl.view`).
"""

from __future__ import annotations

import itertools
import math
import xml.parsers.expat
from dataclasses import dataclass
from pathlib import Path

from ccweave import outfile
from ccweave.errors import InputError, NotApplicableError
from ccweave.nccl import constants as C
from ccweave.nccl.search import NcclGraph, duplicate, speeds
from ccweave.nccl.system import gpu_of, nccl_system
from ccweave.nccl.view import NodeView
from ccweave.synth.rings import find_rings
from ccweave.topology.model import Topology

_TYPES = {name: value for value, name in C.PATH_NAMES.items()}


@dataclass(frozen=True)
class GraphFile:
    """What :func:`write` wrote: the ring and tree graphs and the rings behind them."""

    ring: NcclGraph
    tree: NcclGraph
    ring_bandwidths: tuple[float, ...]
    """Per distinct ring, the bandwidth ccweave's search gave it (GB/s, peak figures)."""


def graphs(topology: Topology, gpu: str | None = None) -> GraphFile:
    """ccweave's rings on ``topology`` (one node) as NCCL ring and tree graphs."""
    if len(topology.groups.get("node", ((),))) > 1:
        raise NotApplicableError(
            f"{topology.name}: NCCL_GRAPH_FILE from ccweave is intra-node only; a multi-node "
            "graph names each channel's NICs by NCCL's network device ids, which ccweave "
            "does not know (give one node's topology, e.g. dgx-a100 for dgx-a100:4)")
    generation = gpu_of(topology, gpu)
    view = NodeView(topology, generation.sm, nccl_system(topology, gpu).cpu)
    rings = find_rings(topology, C.RING_MAX_CHANNELS)
    shares = []
    for ring in rings:
        hops = _hops(ring.order)
        ratio = min(view.capacity[i] / (topology.links[i].bandwidth / 1e9)
                    for a, b in hops for i in view.gpu_paths[a, b].links)
        shares.append(ring.bandwidth / 1e9 * ratio)
    unit = _channel_speed(shares, speeds(generation.sm, False))
    copies = [math.floor(share / unit + 1e-9) for share in shares]
    orders = tuple(order for ring, k in zip(rings, copies) for order in [ring.order] * k)
    ring_type = max(view.gpu_paths[a, b].type for o in orders for a, b in _hops(o))
    tree_type = max((max(view.gpu_paths[a, b].type, view.gpu_paths[b, a].type)
                     for o in orders for a, b in itertools.pairwise(o)), default=C.PATH_LOC)
    same = len(set(orders)) == 1
    speed = round(unit, 3)
    ring = duplicate(NcclGraph(C.PATTERN_RING, len(orders), speed, speed, ring_type,
                               C.PATH_PIX, same_channels=same, orders=orders),
                     generation.sm, C.RING_MAX_CHANNELS)
    tree = NcclGraph(C.PATTERN_BALANCED_TREE, ring.channels, ring.bw_intra, ring.bw_inter,
                     tree_type, C.PATH_PIX, same_channels=same, orders=ring.orders)
    return GraphFile(ring, tree, tuple(r.bandwidth / 1e9 for r in rings))


def _channel_speed(shares: list[float], array: tuple[float, ...]) -> float:
    """The per-channel speed for rings of bandwidths ``shares`` (NCCL's figures), each ring
    listed ``floor(share / speed)`` times within NCCL's ring channels, chosen as NCCL's
    search chooses: from the fastest of NCCL's speeds no faster than the slowest ring
    (or that ring's own, if slower than NCCL's fastest) down, a slower speed only where
    it carries more in all, and none under 0.49 of the one kept."""
    slowest = min(shares)
    options = sorted({s for s in array if s <= slowest + 1e-9}
                     | ({slowest} if slowest <= array[0] else set()), reverse=True)

    def carried(speed: float) -> float:
        copies = [math.floor(share / speed + 1e-9) for share in shares]
        return sum(copies) * speed if sum(copies) <= C.RING_MAX_CHANNELS else -1.0

    best = None
    for speed in options:
        if best is not None and speed / best <= C.SPEED_DROP:
            break
        if carried(speed) > (0.0 if best is None else carried(best) + 1e-9):
            best = speed
    return best if best is not None else sum(shares) / C.RING_MAX_CHANNELS


def _hops(order: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))] \
        if len(order) > 1 else []


def render(found: GraphFile, name: str) -> str:
    """The graph file's text, laid out as NCCL's dump (``ncclTopoDumpXmlRec``)."""
    lines = [f"<!-- ccweave: rings and trees for {_attribute(name)}, "
             "for NCCL_GRAPH_FILE (docs/nccl.md) -->",
             f'<graphs version="{C.GRAPH_XML_VERSION}">']
    for graph_id, graph in ((C.GRAPH_RING, found.ring), (C.GRAPH_TREE, found.tree)):
        lines.append(
            f'  <graph id="{graph_id}" pattern="{graph.pattern}" crossnic="0" '
            f'nchannels="{graph.channels}" speedintra="{graph.bw_intra:g}" '
            f'speedinter="{graph.bw_inter:g}" latencyinter="{graph.latency_inter:g}" '
            f'typeintra="{C.PATH_NAMES[graph.type_intra]}" '
            f'typeinter="{C.PATH_NAMES[graph.type_inter]}" '
            f'samechannels="{int(graph.same_channels)}">')
        for order in graph.orders:
            lines.append("    <channel>")
            lines += [f'      <gpu dev="{_hex(local)}" rank="{rank}"/>'
                      for local, rank in _locals(order)]
            lines.append("    </channel>")
        lines.append("  </graph>")
    lines.append("</graphs>")
    return "\n".join(lines) + "\n"


def _locals(order: tuple[int, ...]) -> list[tuple[int, int]]:
    """(CUDA device, rank) per GPU of a one-node channel: device = rank."""
    return [(rank, rank) for rank in order]


def _hex(value: int) -> str:
    """C's ``%#lx``, as NCCL writes ``dev``: ``0`` for zero, else ``0x..``."""
    return "0" if value == 0 else f"{value:#x}"


def _attribute(text: str) -> str:
    """``text`` safe inside an XML comment read by NCCL's parser (no ``--``, one line)."""
    return " ".join(str(text).replace("--", "- -").split())


def write(path: str | Path, topology: Topology, gpu: str | None = None) -> GraphFile:
    """Write ccweave's rings and trees on ``topology`` as an ``NCCL_GRAPH_FILE``."""
    found = graphs(topology, gpu)
    outfile.write_text(path, render(found, topology.name))
    return found


# ------------------------------------------------------------------ reading a dump


def read_graphs(path: str | Path) -> dict[int, NcclGraph]:
    """NCCL's graphs from its dump (``NCCL_GRAPH_DUMP_FILE``) or a graph file: by graph id
    (0 ring, 1 tree, 3 NVLS), with the figures NCCL's tuning model reads."""
    from ccweave.infile import read_text

    text = read_text(path, "give NCCL's graph dump (NCCL_GRAPH_DUMP_FILE)", errors="replace")
    return parse_graphs(text, str(path))


def parse_graphs(text: str, where: str = "NCCL graph file") -> dict[int, NcclGraph]:
    """The graphs in NCCL graph XML ``text``; ``where`` names it in errors."""
    stack: list[tuple[str, dict[str, str]]] = []
    found: dict[int, NcclGraph] = {}
    channels: list[list[int]] = []
    current: dict[str, str] | None = None

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal current
        if not stack and tag != "graphs":
            raise InputError(f"{where}: starts with <{tag}>; an NCCL graph file starts with "
                             "<graphs version=...>")
        if tag == "graphs" and attrs.get("version") != str(C.GRAPH_XML_VERSION):
            raise InputError(f"{where}: <graphs version={attrs.get('version')!r}>; NCCL "
                             f"{C.NCCL_VERSION} reads version {C.GRAPH_XML_VERSION}")
        if tag == "graph":
            current = attrs
            channels.clear()
        elif tag == "channel":
            channels.append([])
        elif tag == "gpu" and channels:
            channels[-1].append(_int(attrs, "rank", where, tag) if "rank" in attrs
                                else _int(attrs, "dev", where, tag, 16))
        stack.append((tag, attrs))

    def end(tag: str) -> None:
        nonlocal current
        stack.pop()
        if tag == "graph" and current is not None:
            graph_id = _int(current, "id", where, "graph")
            found[graph_id] = _graph(current, channels, where)
            current = None

    parser = xml.parsers.expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as error:
        raise InputError(f"{where}: not XML ({error})") from None
    if not found:
        raise InputError(f"{where}: no <graph> element; is this NCCL_GRAPH_DUMP_FILE's "
                         "output?")
    return found


def _graph(attrs: dict[str, str], channels: list[list[int]], where: str) -> NcclGraph:
    for key in ("pattern", "nchannels", "speedintra", "speedinter", "typeintra", "typeinter",
                "samechannels"):
        if key not in attrs:
            raise InputError(f"{where}: <graph id={attrs.get('id')!r}> lacks {key!r}; NCCL "
                             "writes it in every dump")
    types = []
    for key in ("typeintra", "typeinter"):
        if attrs[key] not in _TYPES:
            raise InputError(f"{where}: {key}={attrs[key]!r}; NCCL knows "
                             + ", ".join(_TYPES))
        types.append(_TYPES[attrs[key]])
    try:
        speeds = [float(attrs[k]) for k in ("speedintra", "speedinter")]
        latency = float(attrs.get("latencyinter", "0"))
    except ValueError:
        raise InputError(f"{where}: <graph id={attrs.get('id')!r}>: speeds and latency must "
                         "be numbers") from None
    count = _int(attrs, "nchannels", where, "graph")
    orders = tuple(tuple(c) for c in channels)
    return NcclGraph(_int(attrs, "pattern", where, "graph"), count, speeds[0], speeds[1],
                     types[0], types[1], latency, _int(attrs, "samechannels", where, "graph")
                     == 1, orders)


def _int(attrs: dict[str, str], key: str, where: str, tag: str, base: int = 0) -> int:
    try:
        return int(attrs[key], base)
    except (KeyError, ValueError):
        raise InputError(f"{where}: <{tag}> needs a whole number {key}=, got "
                         f"{attrs.get(key)!r}") from None

