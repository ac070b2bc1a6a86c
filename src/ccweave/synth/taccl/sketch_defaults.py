"""Sketches read off the topology, so ``--sketch`` is optional.

Inside a node: direct links if they hold the node together (NVLink meshes), else the
switch (NVSwitch, ``uc-max``), else every route. Across nodes, for allgather (and the
reduce-scatter and allreduce built from it), two variants:

- ``relay-per-nic``: one rank per NIC relays (TACCL's insight: the NIC is the scarce
  link; a few relays feed it chunk after chunk while the other ranks use NVLink), the
  one with the cheapest way to it, to its namesake in every other node;
- ``relay-all``: every rank relays to its namesake (``direct-map``).

For alltoall every rank may send to every remote rank (``fully-connected``), and, as
TACCL's alltoall sketches do, ``relay-per-nic``: one rank per NIC gathers its node's
chunks and sends them across to its namesakes, where the contiguity stage merges them
into few large messages (what pays where every message has a cost of its own). Symmetry:
whole-node rotation, and the finest rotation inside a node that the machine really
has; each is kept only if the topology passes the check a user's offsets get.
"""

from __future__ import annotations

from dataclasses import replace

from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.synth.taccl import logical as logical_mod
from ccweave.synth.taccl.sketch_model import (
    Connections,
    Hyperedge,
    InternodeSketch,
    Intranode,
    IntranodeSketch,
    Sketch,
)
from ccweave.topology.model import Topology

DEFAULT_CHUNKUP = 2
"""Chunks per rank in a default sketch: two let a relay forward one while the next
crosses the NIC, at twice the transfers of one."""

DEFAULT_HYPEREDGE = Hyperedge.UC_MAX
VARIANTS = ("one-node", "relay-per-nic", "relay-all", "fully-connected")
"""The default sketches by name: ``--option sketch=NAME`` picks one (a name is not a
file: ``relay-per-nic`` is the variant, ``./relay-per-nic.json`` a file)."""


def default_sketch(topology: Topology, kind: Kind = Kind.ALLGATHER) -> Sketch:
    """The first of :func:`default_sketches`."""
    return default_sketches(topology, kind)[0]


def default_sketches(topology: Topology, kind: Kind = Kind.ALLGATHER) -> list[Sketch]:
    """Sketches that fit ``topology`` for ``kind``, the likeliest best first."""
    nodes = tuple(topology.groups.get("node", ())) or (tuple(topology.ranks),)
    base = _intranode(topology, Sketch(
        internode=_relays(topology, nodes, kind),
        input_chunkup=DEFAULT_CHUNKUP, description="read off the topology",
        source="default sketch"))
    if len(nodes) == 1:
        variants = [("one-node", base)]
    elif kind is Kind.ALLTOALL:
        variants = [("fully-connected", base)]
        mapped = replace(base, internode=InternodeSketch(Connections.DIRECT_MAP))
        relays = _relay_per_nic(topology, mapped) if _fits(topology, mapped) else None
        if relays:
            variants.append(("relay-per-nic", replace(mapped, internode=InternodeSketch(
                Connections.DIRECT_MAP, senders=relays))))
    else:
        relays = _relay_per_nic(topology, base) \
            if base.internode.connections is Connections.DIRECT_MAP else None
        variants = [("relay-per-nic", replace(base, internode=InternodeSketch(
                        Connections.DIRECT_MAP, senders=relays)))] if relays else []
        if relays is None or len(relays) < len(base.internode.senders or nodes[0]):
            variants.append(("relay-all", base))
    return [replace(_with_symmetry(topology, sketch, nodes),
                    name=f"default-{label}({topology.name})") for label, sketch in variants]


def named_sketch(topology: Topology, kind: Kind, name: str) -> Sketch:
    """The default sketch called ``name`` (one of :data:`VARIANTS`) for ``kind``; one
    that does not fit ``topology`` is an ``InputError`` naming those that do."""
    found = {sketch.name.split("(")[0].removeprefix("default-"): sketch
             for sketch in default_sketches(topology, kind)}
    if name not in found:
        raise InputError(f"taccl option sketch={name}: {topology.name!r} has no default "
                         f"{name} sketch for {kind.value}; its default sketches are "
                         f"{', '.join(found)} (or give a sketch file)")
    return found[name]


def _relays(topology: Topology, nodes: tuple[tuple[int, ...], ...],
            kind: Kind) -> InternodeSketch:
    """Every local rank that has routes to its namesakes relays to them (``direct-map``);
    for alltoall, or when no rank has such routes, every rank with a way out sends to
    every rank with a way in (``fully-connected``)."""
    if len(nodes) < 2 or len({len(n) for n in nodes}) != 1:
        return InternodeSketch(Connections.DIRECT_MAP)
    size = len(nodes[0])
    pairs = [(a, b) for a in range(len(nodes)) for b in range(len(nodes)) if a != b]
    mapped = tuple(i for i in range(size)
                   if all(topology.has_route(nodes[a][i], nodes[b][i]) for a, b in pairs))
    if kind is not Kind.ALLTOALL and mapped:
        return InternodeSketch(Connections.DIRECT_MAP,
                               senders=None if len(mapped) == size else mapped)
    out = tuple(i for i in range(size)
                if all(any(topology.has_route(nodes[a][i], v) for v in nodes[b])
                       for a, b in pairs))
    into = tuple(j for j in range(size)
                 if all(topology.has_route(nodes[a][i], nodes[b][j])
                        for a, b in pairs for i in out))
    return InternodeSketch(Connections.FULLY_CONNECTED, senders=out or None,
                           receivers=into or None)


def _intranode(topology: Topology, base: Sketch) -> Sketch:
    for intranode in (IntranodeSketch(Intranode.LINKS),
                      IntranodeSketch(Intranode.SWITCH, DEFAULT_HYPEREDGE),
                      IntranodeSketch(Intranode.ROUTES)):
        candidate = replace(base, intranode=intranode)
        if _fits(topology, candidate):
            return candidate
    raise InputError(f"no default sketch fits {topology.name!r}: some rank cannot reach "
                     "another inside its node; write a sketch (docs/sketches.md)")


def _relay_per_nic(topology: Topology, base: Sketch) -> tuple[int, ...] | None:
    """Local ranks, one per NIC of the first node: the one whose internode sends have the
    least latency (then the lowest local rank). ``None`` if the routes cross no NIC."""
    logical = logical_mod.apply(topology, base)
    first = logical.nodes[0]
    local = {rank: i for i, rank in enumerate(first)}
    alpha = {}
    for e in logical.edges:
        if e.internode and e.src in local:
            alpha[e.src] = min(alpha.get(e.src, float("inf")), e.alpha)
    chosen = []
    for senders in logical.nic_sharing.values():
        mine = [s for s in senders if s in local]
        if mine:
            chosen.append(min(mine, key=lambda s: (round(alpha[s], 12), local[s])))
    return tuple(sorted(local[s] for s in chosen)) or None


def _with_symmetry(topology: Topology, sketch: Sketch,
                   nodes: tuple[tuple[int, ...], ...]) -> Sketch:
    size = len(nodes[0])
    offsets: list[tuple[int, int]] = []
    if len(nodes) > 1 and all(node == tuple(range(i * size, (i + 1) * size))
                              for i, node in enumerate(nodes)):
        offsets.append((size, topology.num_ranks))
    for step in range(1, size):
        if size % step == 0:
            trial = replace(sketch, symmetry_offsets=(*offsets, (step, size)))
            if _fits(topology, trial):
                offsets.append((step, size))
                break
    trial = replace(sketch, symmetry_offsets=tuple(offsets))
    while offsets and not _fits(topology, trial):
        offsets.pop(0)
        trial = replace(sketch, symmetry_offsets=tuple(offsets))
    return trial


def _fits(topology: Topology, sketch: Sketch) -> bool:
    try:
        logical_mod.apply(topology, sketch)
    except InputError:
        return False
    return True
