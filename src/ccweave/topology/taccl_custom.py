"""TACCL's ``custom`` profiled topologies, read unchanged: a node described by matrices.

TACCL takes known machines by name and their link costs from a profile; for any other
node its guide (INPUT_GUIDE.md, "Custom topologies") has the user set the topology to
``custom`` and give, instead of ``node_betas_list`` and ``node_invbws_list``, three
``gpus_per_node`` x ``gpus_per_node`` matrices: ``links`` (how many links join each
pair), ``betas`` (a link's beta) and ``invbws`` (alpha plus beta), beside ``name``,
``gpus_per_node`` and ``alpha``, and for several nodes ``nics_per_node``,
``remote_alpha``, ``remote_beta`` and ``remote_invbw``. As in TACCL's code the matrices
are indexed ``[destination][source]``. (TACCL's own reader of these files crashes on
names it never defines, microsoft/taccl pull request 3; ccweave reads them.)

The node becomes a ccweave machine: GPU ``s`` to GPU ``d`` one link of ``links[d][s]``
times a link's bandwidth (``chunk_bytes`` over the beta), latency ``alpha``; with
``nics_per_node``, GPUs share the NICs in consecutive groups, and ``K`` copies of the
node (``custom.json:K``) join through them on one switch, a route between nodes
streaming at the remote beta's bandwidth with latency ``remote_alpha``. Betas are times
of one chunk of ``chunk_bytes`` (1 MB unless told), figures multiplied by ``scale``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from ccweave.errors import TopologyError
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.plausible import MAX_ALPHA_US, PLAUSIBLE_GBPS
from ccweave.units import GB_PER_S, US

MATRICES = ("links", "betas", "invbws")
FIELDS = {"name", "gpus_per_node", "alpha", *MATRICES, "nics_per_node", "remote_alpha",
          "remote_beta", "remote_invbw"}
DEFAULT_CHUNK_BYTES = 2**20
"""TACCL's examples are for 1 MB chunks."""
NIC_HOPS = 4
"""Links of a route between nodes (GPU -> NIC -> switch -> NIC -> GPU): each takes a
quarter of ``remote_alpha``."""


def is_custom(data: object) -> bool:
    """Whether parsed JSON is a TACCL custom profile: its matrices and gpus_per_node."""
    return isinstance(data, Mapping) and "gpus_per_node" in data and \
        any(isinstance(data.get(m), list) for m in MATRICES)


def machine(data: Mapping, source: str, nodes: int = 1,
            chunk_bytes: float = DEFAULT_CHUNK_BYTES, scale: float = 1.0) -> Topology:
    """The machine of a TACCL custom profile: ``nodes`` copies of its node (see the module
    docstring). ``TopologyError`` names the file and TACCL's field on bad input."""
    unknown = sorted(set(data) - FIELDS - {"comment"})
    if unknown:
        raise TopologyError(f"{source}: unknown field {unknown[0]!r} in a TACCL custom "
                            f"profile; TACCL's fields: {', '.join(sorted(FIELDS))}")
    gpus = data.get("gpus_per_node")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise TopologyError(f"{source}: gpus_per_node must be a positive integer, got "
                            f"{gpus!r}")
    unit = US / scale
    alpha = _number(data, "alpha", source) * unit
    links = _matrix(data, "links", gpus, source, integer=True)
    betas = _matrix(data, "betas", gpus, source)
    _matrix(data, "invbws", gpus, source)  # alpha + beta: TACCL's MILP reads them
    if not any(links[d][s] for d in range(gpus) for s in range(gpus)) and gpus > 1:
        raise TopologyError(f"{source}: links has no link between any two GPUs; give "
                            "links[destination][source] > 0 where GPUs are joined")
    server: list[Link] = []
    for d in range(gpus):
        for s in range(gpus):
            if s == d or not links[d][s]:
                continue
            if betas[d][s] <= 0:
                raise TopologyError(f"{source}: betas[{d}][{s}] is {betas[d][s]!r} but "
                                    f"links[{d}][{s}] joins GPU {s} to GPU {d}; give that "
                                    "link's beta (microseconds per chunk)")
            bandwidth = links[d][s] * _bandwidth(chunk_bytes, betas[d][s] * unit, source,
                                                 f"betas[{d}][{s}]")
            server.append(Link(s, d, bandwidth, alpha, "link"))
    _check_alpha(alpha, source, "alpha")
    name = str(data.get("name", Path(source).stem))
    nics = _nics(data, source, gpus, nodes)
    if nodes == 1 or nics is None:
        if nodes > 1:
            raise TopologyError(f"{source}: {nodes} nodes need nics_per_node, remote_alpha "
                                "and remote_beta (how the nodes are joined)")
        return Topology(f"custom-{name}", gpus, tuple(server), {},
                        {"node": (tuple(range(gpus)),)},
                        source=f"TACCL custom profile {source}")
    count, remote_alpha, remote_beta = nics
    remote = _bandwidth(chunk_bytes, remote_beta * unit, source, "remote_beta")
    hop = remote_alpha * unit / NIC_HOPS
    _check_alpha(remote_alpha * unit, source, "remote_alpha")
    links_all: list[Link] = []
    fabric: dict[str, NodeKind] = {"net": NodeKind.SWITCH}
    per_nic = math.ceil(gpus / count)
    for node in range(nodes):
        base = node * gpus
        links_all += [Link(lk.src + base, lk.dst + base, lk.bandwidth, lk.alpha, lk.kind)
                      for lk in server]
        for k in range(count):
            nic = f"n{node}.nic{k}"
            fabric[nic] = NodeKind.NIC
            for gpu in range(k * per_nic, min(gpus, (k + 1) * per_nic)):
                links_all += [Link(base + gpu, nic, remote, hop, "pcie"),
                              Link(nic, base + gpu, remote, hop, "pcie")]
            links_all += [Link(nic, "net", remote, hop, "net"), Link("net", nic, remote, hop,
                                                                      "net")]
    groups = {"node": tuple(tuple(range(n * gpus, (n + 1) * gpus)) for n in range(nodes))}
    return Topology(f"custom-{name}:{nodes}", nodes * gpus, tuple(links_all), fabric,
                    groups, source=f"TACCL custom profile {source}, {nodes} nodes on one "
                                   "switch")


def _nics(data: Mapping, source: str, gpus: int, nodes: int
          ) -> tuple[int, float, float] | None:
    count = data.get("nics_per_node")
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= gpus:
        raise TopologyError(f"{source}: nics_per_node must be an integer from 1 to "
                            f"gpus_per_node ({gpus}), got {count!r}")
    missing = [f for f in ("remote_alpha", "remote_beta") if f not in data]
    if missing:
        raise TopologyError(f"{source}: nics_per_node is given but {missing[0]} is not; "
                            "TACCL's profile has remote_alpha, remote_beta and remote_invbw")
    return count, _number(data, "remote_alpha", source), \
        _number(data, "remote_beta", source, positive=True)


def _number(data: Mapping, field: str, source: str, positive: bool = False) -> float:
    value = data.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "a positive number" if positive else "a number >= 0"
        raise TopologyError(f"{source}: {field} must be {need} (microseconds, times the "
                            f"profile's scale), got {value!r}")
    return float(value)


def _matrix(data: Mapping, field: str, size: int, source: str,
            integer: bool = False) -> list[list[float]]:
    rows = data.get(field)
    if not isinstance(rows, list) or len(rows) != size or any(
            not isinstance(row, list) or len(row) != size for row in rows):
        raise TopologyError(f"{source}: {field} must be a {size} x {size} matrix "
                            f"(gpus_per_node rows of gpus_per_node numbers, "
                            f"{field}[destination][source])")
    for d, row in enumerate(rows):
        for s, value in enumerate(row):
            bad = isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or value < 0 or (integer and value != int(value))
            if bad:
                kind = "a whole number >= 0" if integer else "a number >= 0"
                raise TopologyError(f"{source}: {field}[{d}][{s}] must be {kind}, got "
                                    f"{value!r}")
    return [[float(v) for v in row] for row in rows]


def _bandwidth(chunk_bytes: float, seconds: float, source: str, field: str) -> float:
    bandwidth = chunk_bytes / seconds
    low, high = PLAUSIBLE_GBPS
    if not low * GB_PER_S <= bandwidth <= high * GB_PER_S:
        raise TopologyError(f"{source}: {field} gives {bandwidth / GB_PER_S:.3g} GB/s for "
                            f"{chunk_bytes:g}-byte chunks, outside {low:g}..{high:g} GB/s "
                            "where every real link lies; give microseconds per chunk")
    return bandwidth


def _check_alpha(seconds: float, source: str, field: str) -> None:
    if seconds > MAX_ALPHA_US * US:
        raise TopologyError(f"{source}: {field} is {seconds / US:.3g} us, over the "
                            f"{MAX_ALPHA_US:g} us no real link takes")
