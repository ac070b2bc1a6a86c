"""Several copies of one imported server, joined through their NICs: on one non-blocking
switch (``switch``, as the zoo's ``NAME:K``), or rail-optimized (``rails``).

Rail-optimized is the DGX SuperPOD compute fabric: NIC ``k`` of every node sits on leaf
switch ``railk``, so traffic between the same NIC of two nodes is one switch away, and
the leaves are joined by a spine layer that traffic between rails crosses ("Traffic per
rail of the DGX H100 systems is always one hop away from the other 31 nodes in a SU.
Traffic between nodes, or between rails, traverses the spine layer": NVIDIA DGX SuperPOD
reference architecture, H100, Network Fabrics,
https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-h100/latest/network-fabrics.html).
The spine is modelled as one switch ``spine``, each leaf's uplink as fast as its NICs
together (SuperPOD's leaves have as many spine cables as node cables: non-blocking).
"""

from __future__ import annotations

from collections.abc import Mapping

from ccweave import limits
from ccweave.errors import InputError
from ccweave.topology import zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.provenance import Provenance
from ccweave.units import GB_PER_S, US

FABRICS = ("switch", "rails")
NIC_ALPHA_US = zoo.NIC_ALPHA_US
SPINE_ALPHA_US = zoo.NIC_ALPHA_US
"""A leaf-spine hop: the zoo's NIC-to-switch figure again (assumed; the reference gives no
per-hop figure), so a message between rails pays two more switch hops than one within
a rail."""


def replicate(server: Topology, nics: Mapping[str, float], nodes: int, fabric: str = "switch",
              name: str | None = None, nic_source: str = "") -> Topology:
    """``nodes`` copies of a one-node ``server`` joined through its NICs (name -> GB/s, in
    rail order: NIC ``k`` of each node on rail ``k``).

    Node ``n``'s ranks are ``r + n * server.num_ranks`` and its fabric nodes are prefixed
    ``n{n}.``; ``fabric`` is ``switch`` (every NIC on one non-blocking switch ``net``) or
    ``rails`` (NIC ``k`` on leaf ``railk``, the leaves on ``spine``). ``nic_source`` says
    where the NIC speeds came from (for ``topo show``).
    """
    if fabric not in FABRICS:
        raise InputError(f"--fabric {fabric!r}: choose one of {', '.join(FABRICS)}")
    if nodes < 1:
        raise InputError(f"--nodes {nodes}: the number of nodes must be at least 1")
    if nodes == 1:
        return server
    if not nics:
        raise InputError(f"{server.name}: has no NIC, so {nodes} nodes cannot be joined; "
                         "import a file that lists the NICs (or use --nodes 1)")
    g = server.num_ranks
    limits.check_ranks(f"--nodes {nodes} of {server.name} ({g} ranks each)", nodes * g)
    limits.check(f"--nodes {nodes} of {server.name}", nodes * (len(server.fabric) + 1),
                 limits.MAX_FABRIC_NODES, "fabric nodes", "join fewer nodes")
    links: list[Link] = []
    fabric_nodes: dict[str, NodeKind] = {}
    for node in range(nodes):
        def rename(end, node=node):
            return end + node * g if isinstance(end, int) else f"n{node}.{end}"

        fabric_nodes.update({rename(f): k for f, k in server.fabric.items()})
        links += [Link(rename(lk.src), rename(lk.dst), lk.bandwidth, lk.alpha, lk.kind)
                  for lk in server.links]
        for rail, (nic, gbps) in enumerate(nics.items()):
            switch = "net" if fabric == "switch" else f"rail{rail}"
            links += _duplex(rename(nic), switch, gbps, NIC_ALPHA_US, "net")
    if fabric == "switch":
        fabric_nodes["net"] = NodeKind.SWITCH
        joined = f"{nodes} nodes on one non-blocking switch"
    else:
        fabric_nodes["spine"] = NodeKind.SWITCH
        for rail, gbps in enumerate(nics.values()):
            fabric_nodes[f"rail{rail}"] = NodeKind.SWITCH
            links += _duplex(f"rail{rail}", "spine", nodes * gbps, SPINE_ALPHA_US, "spine")
        joined = (f"{nodes} nodes rail-optimized: NIC k of each node on leaf railk, "
                  f"{len(nics)} leaves on one non-blocking spine")
    groups = {kind: tuple(tuple(r + n * g for r in part) for n in range(nodes)
                          for part in parts) for kind, parts in server.groups.items()}
    groups["node"] = tuple(tuple(range(n * g, (n + 1) * g)) for n in range(nodes))
    origin = dict(server.provenance.links)
    origin["net"] = (f"{nic_source + '; ' if nic_source else ''}NIC to switch alpha "
                     f"{NIC_ALPHA_US:g} us (the zoo's); {joined}")
    if fabric == "rails":
        origin["spine"] = (f"leaf to spine: each leaf as fast as its {nodes} NICs together "
                           f"(non-blocking, as DGX SuperPOD), alpha {SPINE_ALPHA_US:g} us "
                           "(assumed: the zoo's NIC-to-switch figure)")
    return Topology(name or f"{server.name}:{nodes}", nodes * g, tuple(links), fabric_nodes,
                    groups, server.local_bandwidth, f"{server.source}; {joined}", server.cost,
                    Provenance(origin, server.provenance.warnings))


def _duplex(a, b, gbps: float, alpha_us: float, kind: str) -> list[Link]:
    return [Link(a, b, gbps * GB_PER_S, alpha_us * US, kind),
            Link(b, a, gbps * GB_PER_S, alpha_us * US, kind)]
