"""TACCL's profiled-topology files (``topo-ndv2-1MB.json``...), read unchanged, as the link
costs of a machine.

A TACCL profile gives, for one node type, the latency ``alpha`` of intranode links, the
``beta`` of each intranode link class (``node_betas_list``, fastest first), and the
latency and beta of a remote send (``remote_alpha``, ``remote_beta``). Betas are the
time of one chunk of the size the profile was made for (TACCL's guide: a beta in us/MB
times the chunk size in MB), and TACCL's guide has users multiply every figure by a
factor so that they have an integral part (``topo-ndv2-1KB.json`` holds 100 times
microseconds). So a profile is read with that chunk size and that factor, both options.

A profile has no machine in it (TACCL takes the machine by name), so it re-costs a
ccweave machine of the same shape (:func:`apply`): its intranode GPU links, grouped by
speed, take the classes' bandwidths (an NVSwitch machine: the GPU ports of its switch),
its NIC-to-network links the remote bandwidth, and the links of an internode route are
scaled so the route's latency is ``remote_alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ccweave.errors import InputError
from ccweave.jsonfile import read_json
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.plausible import MAX_ALPHA_US, PLAUSIBLE_GBPS
from ccweave.units import GB_PER_S, shown

US = 1e-6
DEFAULT_CHUNK_BYTES = 2**20
"""Chunk size a profile's betas are for unless told: TACCL's examples are "for 1MB data
chunks" (``topo-*-1MB.json``, in plain microseconds)."""
FIELDS = {"name", "gpus_per_node", "nics_per_node", "alpha", "node_betas_list",
          "node_invbws_list", "remote_alpha", "remote_beta", "remote_invbw"}
MARKERS = frozenset({"gpus_per_node", "node_betas_list", "remote_beta"})
"""Fields that make a JSON file a TACCL profile rather than a ccweave topology."""
_CUSTOM = {"links", "betas", "invbws"}


@dataclass(frozen=True)
class Profile:
    """Link costs of one node type, in seconds and bytes/second.

    ``node_bandwidths`` has one entry per intranode link class, fastest first;
    ``remote_bandwidth`` and ``remote_alpha`` are ``None`` for a one-node profile.
    """

    name: str
    gpus_per_node: int
    nics_per_node: int | None
    alpha: float
    node_bandwidths: tuple[float, ...]
    remote_alpha: float | None
    remote_bandwidth: float | None
    source: str


def is_profile(data: object) -> bool:
    """Whether ``data`` (parsed JSON) is a TACCL profiled topology."""
    return isinstance(data, Mapping) and bool(MARKERS & set(data))


def load(path: str | Path, chunk_bytes: float = DEFAULT_CHUNK_BYTES,
         scale: float = 1.0) -> Profile:
    """Read a TACCL profile; ``chunk_bytes`` is the chunk size its betas are for, ``scale``
    the factor its figures were multiplied by. Errors name the file and the field."""
    data = read_json(path, "give a TACCL profiled topology such as topo-ndv2-1MB.json")
    return from_dict(data, str(path), chunk_bytes, scale)


def from_dict(data: object, source: str, chunk_bytes: float = DEFAULT_CHUNK_BYTES,
              scale: float = 1.0) -> Profile:
    """A :class:`Profile` from the file's JSON (see :func:`load`)."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: a TACCL profile is a JSON object with fields "
                         "gpus_per_node, alpha, node_betas_list, remote_alpha, remote_beta")
    if _CUSTOM & set(data):
        raise InputError(f"{source}: a TACCL 'custom' profile (links/betas/invbws matrices) "
                         "is a machine of its own, as TACCL's 'custom' topology: give it "
                         f"where the machine goes, e.g. ccweave synth {source}:2 allgather "
                         "--strategy taccl (two nodes)")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise InputError(f"{source}: unknown field {unknown[0]!r} in a TACCL profile; known: "
                         + ", ".join(sorted(FIELDS)))
    for name, value in (("chunk size", chunk_bytes), ("scale", scale)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise InputError(f"{source}: the profile's {name} must be a positive number, "
                             f"got {value!r}")

    def number(field: str, required: bool = True, positive: bool = False) -> float | None:
        value = data.get(field)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0 or (positive and value == 0):
            need = "a positive number" if positive else "a number >= 0"
            raise InputError(f"{source}: {field} must be {need} (microseconds, times the "
                             f"profile's scale), got {value!r}")
        return float(value)

    gpus = data.get("gpus_per_node")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise InputError(f"{source}: gpus_per_node must be a positive integer, got {gpus!r}")
    nics = data.get("nics_per_node")
    if nics is not None and (isinstance(nics, bool) or not isinstance(nics, int) or nics < 1):
        raise InputError(f"{source}: nics_per_node must be a positive integer, got {nics!r}")
    betas = _positive_list(data, "node_betas_list", source, required=True)
    _positive_list(data, "node_invbws_list", source)  # TACCL's MILP reads them; checked only
    unit = US / scale
    alpha = number("alpha")
    remote_alpha = number("remote_alpha", required=False)
    remote_beta = number("remote_beta", required=False, positive=True)
    number("remote_invbw", required=False, positive=True)  # as node_invbws_list
    if (remote_alpha is None) != (remote_beta is None):
        raise InputError(f"{source}: give remote_alpha and remote_beta together (a remote "
                         "send's latency and the time of one chunk)")
    name = data.get("name", Path(source).stem)
    def bandwidth(beta: float) -> float:  # bytes/second; a beta of 1e-320 us is no time
        seconds = beta * unit
        return chunk_bytes / seconds if seconds > 0 else math.inf

    bandwidths = {f"node_betas_list[{k}]": bandwidth(b) for k, b in enumerate(betas)}
    if remote_beta is not None:
        bandwidths["remote_beta"] = bandwidth(remote_beta)
    for field, bandwidth in bandwidths.items():
        _plausible(source, field, bandwidth, chunk_bytes, scale)
    _plausible_latency(source, "alpha", alpha * unit)  # type: ignore[operator]
    if remote_alpha is not None:
        _plausible_latency(source, "remote_alpha", remote_alpha * unit)
    return Profile(str(name), gpus, nics, alpha * unit,  # type: ignore[operator]
                   tuple(sorted((bandwidths[f"node_betas_list[{k}]"]
                                 for k in range(len(betas))), reverse=True)),
                   None if remote_alpha is None else remote_alpha * unit,
                   bandwidths.get("remote_beta"), source)


def _positive_list(data: Mapping, field: str, source: str,
                   required: bool = False) -> list[float]:
    """``data[field]``, a non-empty list of positive finite numbers (one per link class)."""
    values = data.get(field)
    if values is None and not required:
        return []
    if not isinstance(values, list) or not values or any(
            isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b)
            or b <= 0 for b in values):
        raise InputError(f"{source}: {field} must be a non-empty list of positive numbers "
                         f"(one per intranode link class), got {shown(values)}")
    return values


def _plausible(source: str, field: str, bandwidth: float, chunk_bytes: float,
               scale: float) -> None:
    """A beta whose bandwidth no real link has (:mod:`ccweave.topology.plausible`) is
    refused."""
    low, high = (gbps * GB_PER_S for gbps in PLAUSIBLE_GBPS)
    if not low <= bandwidth <= high:
        raise InputError(f"{source}: {field} gives {bandwidth / GB_PER_S:.3g} GB/s for "
                         f"{chunk_bytes:g}-byte chunks at scale {scale:g}, outside "
                         f"{PLAUSIBLE_GBPS[0]:g}..{PLAUSIBLE_GBPS[1]:g} GB/s where every real "
                         "link lies; give the beta in microseconds per chunk (times the "
                         "profile's scale)")


def _plausible_latency(source: str, field: str, seconds: float) -> None:
    if seconds > MAX_ALPHA_US * US:
        raise InputError(f"{source}: {field} is {seconds / US:.3g} us, over the "
                         f"{MAX_ALPHA_US:g} us no real link takes; give microseconds (times "
                         "the profile's scale)")


def apply(profile: Profile, topology: Topology) -> Topology:
    """``topology`` with ``profile``'s link costs (see the module docstring); an
    ``InputError`` names the field when the machine has another shape."""
    source = profile.source
    nodes = tuple(topology.groups.get("node", ())) or (tuple(topology.ranks),)
    node_of = {rank: number for number, node in enumerate(nodes) for rank in node}
    sizes = {len(node) for node in nodes}
    if sizes != {profile.gpus_per_node}:
        raise InputError(f"{source}: gpus_per_node is {profile.gpus_per_node} but "
                         f"{topology.name!r} has {sorted(sizes)} ranks per node; use a profile "
                         "of this machine")
    nics = sum(kind is NodeKind.NIC for kind in topology.fabric.values())
    if len(nodes) > 1 and profile.nics_per_node is not None \
            and nics != profile.nics_per_node * len(nodes):
        raise InputError(f"{source}: nics_per_node is {profile.nics_per_node} but "
                         f"{topology.name!r} has {nics // len(nodes)} NIC(s) per node; use a "
                         "profile of this machine")
    links = list(topology.links)
    direct = [i for i, lk in enumerate(links) if topology.is_rank(lk.src)
              and topology.is_rank(lk.dst) and node_of[lk.src] == node_of[lk.dst]]
    hops = 1
    if not direct:  # a switched node: the GPU ports of its switch
        direct = [i for i, lk in enumerate(links)
                  if (topology.is_rank(lk.src) and _switch(topology, lk.dst))
                  or (topology.is_rank(lk.dst) and _switch(topology, lk.src))]
        hops = 2
    speeds = sorted({links[i].bandwidth for i in direct}, reverse=True)
    if len(speeds) != len(profile.node_bandwidths):
        raise InputError(f"{source}: node_betas_list has {len(profile.node_bandwidths)} link "
                         f"class(es) but {topology.name!r} has intranode GPU links of "
                         f"{len(speeds)} speed(s) "
                         f"({', '.join(f'{b / 1e9:g}' for b in speeds)} GB/s); use a profile "
                         "of this machine")
    new_bandwidth = dict(zip(speeds, profile.node_bandwidths))
    recosted = set(direct)
    for i in direct:
        lk = links[i]
        links[i] = replace(lk, bandwidth=new_bandwidth[lk.bandwidth],
                           alpha=profile.alpha / hops)
    if len(nodes) > 1 and profile.remote_alpha is not None:
        links = _remote(topology, links, recosted, profile, nodes)
    return replace(topology, name=f"{topology.name}+{profile.name}", links=tuple(links),
                   source=f"{topology.source}; link costs from TACCL profile {source}")


def _switch(topology: Topology, node: object) -> bool:
    """A switch that ranks attach to directly (NVSwitch), not the network switch."""
    return isinstance(node, str) and topology.kind(node) is NodeKind.SWITCH and any(
        topology.is_rank(lk.src) for lk in topology.links if lk.dst == node)


def _remote(topology: Topology, links: list[Link], recosted: set[int], profile: Profile,
            nodes: tuple[tuple[int, ...], ...]) -> list[Link]:
    """NIC-to-network links at the remote bandwidth; the other links of internode routes
    scaled so a route from one node to the next has latency ``remote_alpha``."""
    assert profile.remote_alpha is not None and profile.remote_bandwidth is not None
    network = {i for i, lk in enumerate(links)
               if {topology.kind(lk.src), topology.kind(lk.dst)} == {NodeKind.NIC,
                                                                     NodeKind.SWITCH}}
    if not network:
        raise InputError(f"{profile.source}: {topology.name!r} has no NIC-to-network links "
                         "for remote_beta")
    for i in network:
        links[i] = replace(links[i], bandwidth=profile.remote_bandwidth)
    route = topology.route(nodes[0][0], nodes[1][0])
    others = [i for i in range(len(links)) if i not in recosted]
    total = sum(links[i].alpha for i in route if i not in recosted)
    if total > 0:  # every link the recosting left alone (PCIe, host, NIC, network)
        factor = profile.remote_alpha / total
        for i in others:
            links[i] = replace(links[i], alpha=links[i].alpha * factor)
    else:
        crossed = [i for i in route if i in network]
        for i in network:
            links[i] = replace(links[i], alpha=profile.remote_alpha / len(crossed))
    return links
