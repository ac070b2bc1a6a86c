"""The sketch used when none is given: read off the topology, so ``--sketch`` is optional.

Inside a node: direct links if they hold the node together (NVLink meshes), else the
switch (NVSwitch, ``uc-max``), else every route. Across nodes: every local rank relays
to its namesake (``direct-map``), so each GPU uses the NIC its topology gives it; for
alltoall every local rank may send to every remote one (``fully-connected``), since
its chunks are for one destination each and relaying them only adds hops.
Symmetry: whole-node rotation, and the finest rotation inside a node that the machine
really has; each is kept only if the topology passes the check a user's offsets get.
"""

from __future__ import annotations

from dataclasses import replace

from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.synth.taccl import logical as logical_mod
from ccweave.synth.taccl.sketch import (
    Connections,
    Hyperedge,
    InternodeSketch,
    Intranode,
    IntranodeSketch,
    Sketch,
)
from ccweave.topology.model import Topology

DEFAULT_CHUNKUP = 2
"""Chunks per rank in the default sketch: two let a relay forward one while the next
crosses the NIC, at twice the transfers of one."""

DEFAULT_HYPEREDGE = Hyperedge.UC_MAX


def default_sketch(topology: Topology, kind: Kind = Kind.ALLGATHER) -> Sketch:
    """A sketch that fits ``topology`` for ``kind``: see the module docstring."""
    nodes = tuple(topology.groups.get("node", ())) or (tuple(topology.ranks),)
    connections = Connections.FULLY_CONNECTED if kind is Kind.ALLTOALL \
        else Connections.DIRECT_MAP
    base = Sketch(internode=InternodeSketch(connections),
                  input_chunkup=DEFAULT_CHUNKUP, name=f"default({topology.name}, {kind.value})",
                  description="read off the topology", source="default sketch")
    sketch = None
    for intranode in (IntranodeSketch(Intranode.LINKS),
                      IntranodeSketch(Intranode.SWITCH, DEFAULT_HYPEREDGE),
                      IntranodeSketch(Intranode.ROUTES)):
        candidate = replace(base, intranode=intranode)
        if _fits(topology, candidate):
            sketch = candidate
            break
    if sketch is None:
        raise InputError(f"no default sketch fits {topology.name!r}: some rank cannot reach "
                         "another inside its node; write a sketch (docs/sketches.md)")
    size = len(nodes[0])
    offsets: list[tuple[int, int]] = []
    if len(nodes) > 1 and all(len(node) == size for node in nodes) \
            and all(node == tuple(range(i * size, (i + 1) * size))
                    for i, node in enumerate(nodes)):
        offsets.append((size, topology.num_ranks))
    for step in range(1, size):
        if size % step == 0 and size > 1:
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
