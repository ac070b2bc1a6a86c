"""Topology files (JSON, see docs/topology-format.md) and the one way to name a topology.

``load("dgx-a100:2")`` takes a zoo name; ``load("my-cluster.json")`` a file, also a TACCL
``custom`` profile (:mod:`.taccl_custom`), ``load("custom.json:2")`` two nodes of one.
Every error names the file and the field, and says what to write instead.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ccweave import limits
from ccweave.errors import TopologyError
from ccweave.jsonfile import read_json
from ccweave.topology import cost, provenance, taccl_custom, zoo
from ccweave.topology.model import Link, NodeKind, Topology
from ccweave.topology.plausible import check_bandwidth, check_latency
from ccweave.units import GB_PER_S, US, shown

FORMAT = "ccweave.topology"
"""The ``format`` field ``topo show --json`` writes (optional when reading)."""

_TOP_FIELDS = {"name", "ranks", "fabric", "links", "groups", "local_bw_GBps", "source",
               "cost_model", "provenance", "format", "comment", "summary"}
_IGNORED_FIELDS = {"format", "comment", "summary"}
"""Read and ignored: ``summary`` holds the counts ``topo show --json`` prints beside the
topology, so its output loads back."""
_TACCL_PROFILE = {"gpus_per_node", "node_betas_list", "remote_beta"}
"""Fields of TACCL's profiled topologies (ccweave.synth.taccl.profile reads them)."""
_LINK_FIELDS = {"src", "dst", "bw_GBps", "alpha_us", "duplex", "kind", "count"}


def load(spec: str | Path) -> Topology:
    """A topology from a zoo name (``ndv2:2``) or a JSON file path; checked for connectivity."""
    text = str(spec)
    path = Path(text)
    copies = re.fullmatch(r"(.+\.json):(\d+)", text, re.IGNORECASE)
    if copies and not _exists(path):  # FILE.json:K, K nodes of a TACCL custom profile
        data = read_json(copies[1], "give a TACCL custom profile (links, betas, invbws "
                                    "matrices) before :K", TopologyError)
        if not taccl_custom.is_custom(data):
            raise TopologyError(f"{text}: FILE:K joins K nodes of a TACCL custom profile; "
                                f"{copies[1]} is not one (a ccweave topology file names all "
                                "its nodes)")
        topology = taccl_custom.machine(data, copies[1], int(copies[2]))
        topology.check_connected()
        return topology
    if path.suffix.lower() in (".json", ".yaml", ".yml") or _exists(path):
        topology = read(path)
        try:
            topology.check_connected()
        except TopologyError as error:
            raise TopologyError(f"{path}: {error}") from None
        return topology
    topology = zoo.get(text)
    topology.check_connected()
    return topology


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for a file, or with a NUL in it
        return False


def read(path: str | Path) -> Topology:
    """Read a topology JSON file."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        raise TopologyError(f"{path}: YAML topologies are not supported; write the same "
                            "fields as JSON (docs/topology-format.md)")
    data = read_json(path, "give a topology JSON file (docs/topology-format.md) or a zoo "
                           "name such as dgx1 or ndv2:2", TopologyError)
    return from_dict(data, str(path))


def from_dict(data: object, source: str = "topology") -> Topology:
    """Build a Topology from the file format's dict; ``source`` names it in errors."""
    if not isinstance(data, dict):
        raise TopologyError(f"{source}: the top level must be an object with fields "
                            "name, ranks, fabric, links, groups")
    if taccl_custom.is_custom(data):
        return taccl_custom.machine(data, source)
    if _TACCL_PROFILE & set(data):
        raise TopologyError(f"{source}: a TACCL profiled topology (link costs per link class, "
                            "no machine); name the machine and give the file for its costs: "
                            f"ccweave synth ndv2:2 allgather --strategy taccl --profile {source}")
    if data.get("format", FORMAT) != FORMAT:
        raise TopologyError(f"{source}: \"format\": {data['format']!r} is not a topology "
                            f"(expected {FORMAT!r}, or no format field)")
    unknown = set(data) - _TOP_FIELDS
    if unknown:
        raise TopologyError(f"{source}: unknown field(s) {sorted(unknown)}; allowed: "
                            f"{sorted(_TOP_FIELDS - _IGNORED_FIELDS)}")
    ranks = data.get("ranks")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise TopologyError(f"{source}: field 'ranks' must be a positive integer (ranks are "
                            f"0..ranks-1), got {shown(ranks)}")
    limits.check_ranks(f"{source}: field 'ranks'", ranks)
    fabric = data.get("fabric", {})
    if not isinstance(fabric, dict):
        raise TopologyError(f"{source}: field 'fabric' must map names to kinds, e.g. "
                            '{"sw0": "switch"}')
    limits.check(f"{source}: field 'fabric'", len(fabric), limits.MAX_FABRIC_NODES,
                 "fabric nodes", "model fewer switches")
    kinds = {k.value for k in NodeKind if k is not NodeKind.RANK}
    for name, kind in fabric.items():
        if not isinstance(kind, str) or kind not in kinds:
            raise TopologyError(f"{source}: fabric[{shown(name)}] = {shown(kind)}; use one of "
                                f"{sorted(kinds)}")
    links_data = data.get("links")
    if not isinstance(links_data, list) or not links_data:
        raise TopologyError(f"{source}: field 'links' must be a non-empty list of "
                            '{"src", "dst", "bw_GBps", "alpha_us"} objects')
    limits.check(f"{source}: field 'links'", len(links_data), limits.MAX_LINKS, "links",
                 "model fewer links")
    links: list[Link] = []
    for number, item in enumerate(links_data):
        links.extend(_link(item, f"{source}: links[{number}]", ranks, fabric))
    limits.check(f"{source}: field 'links'", len(links), limits.MAX_LINKS,
                 "directed links (duplex ones count twice)", "model fewer links")
    groups = data.get("groups", {})
    if not isinstance(groups, dict) or not all(
            isinstance(v, list) and all(isinstance(p, list) for p in v) for v in groups.values()):
        raise TopologyError(f"{source}: field 'groups' must map a kind to a list of rank "
                            'lists, e.g. {"node": [[0, 1], [2, 3]]}')
    local = data.get("local_bw_GBps", 1000.0)
    if isinstance(local, bool) or not isinstance(local, (int, float)) or not (
            0 < local < math.inf):
        raise TopologyError(f"{source}: field 'local_bw_GBps' must be a positive number")
    check_bandwidth(f"{source}: field 'local_bw_GBps'", local)
    name = data.get("name", Path(source).stem)
    model = cost.from_dict(data["cost_model"], source) if "cost_model" in data else \
        cost.CostModel()
    origin = provenance.from_dict(data["provenance"], source) if "provenance" in data else \
        provenance.Provenance()
    try:
        return Topology(str(name), ranks, tuple(links), dict(fabric),
                        {k: tuple(tuple(p) for p in v) for k, v in groups.items()},
                        float(local) * GB_PER_S, str(data.get("source", source)), model, origin)
    except TopologyError as error:
        raise TopologyError(f"{source}: {error}") from None


def _link(item: object, where: str, ranks: int, fabric: dict) -> list[Link]:
    if not isinstance(item, dict):
        raise TopologyError(f"{where}: each link is an object with src, dst, bw_GBps, alpha_us")
    unknown = set(item) - _LINK_FIELDS
    if unknown:
        raise TopologyError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: "
                            f"{sorted(_LINK_FIELDS)}")
    for field in ("src", "dst", "bw_GBps"):
        if field not in item:
            raise TopologyError(f"{where}: missing field {field!r}")
    for field in ("src", "dst"):
        end = item[field]
        if isinstance(end, bool) or not isinstance(end, (int, str)):
            raise TopologyError(f"{where}: field {field!r} must be a rank number or a fabric "
                                f"node name, got {shown(end)}")
        if not (0 <= end < ranks if isinstance(end, int) else end in fabric):
            raise TopologyError(f"{where}: field {field!r}: unknown node {shown(end)}; ranks "
                                f"are 0..{ranks - 1}, fabric nodes must be declared in 'fabric'")
    if item["src"] == item["dst"]:
        raise TopologyError(f"{where}: src and dst are both {shown(item['src'])}; a link joins "
                            "two different nodes")
    numbers = {}
    for field, default in (("bw_GBps", None), ("alpha_us", 0.0), ("count", 1)):
        value = item.get(field, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TopologyError(f"{where}: field {field!r} must be a number, got {shown(value)}")
        if not math.isfinite(value):
            raise TopologyError(f"{where}: field {field!r} is {value!r}; give a finite number")
        numbers[field] = value
    if numbers["bw_GBps"] <= 0 or numbers["alpha_us"] < 0 or numbers["count"] < 1:
        raise TopologyError(f"{where}: need bw_GBps > 0, alpha_us >= 0 and count >= 1")
    check_bandwidth(f"{where}: field 'bw_GBps'" if numbers["count"] == 1 else
                    f"{where}: bw_GBps x count", numbers["bw_GBps"] * numbers["count"])
    check_latency(f"{where}: field 'alpha_us'", numbers["alpha_us"])
    bandwidth = numbers["bw_GBps"] * numbers["count"] * GB_PER_S
    duplex = item.get("duplex", False)
    if not isinstance(duplex, bool):
        raise TopologyError(f"{where}: field 'duplex' must be true or false")
    alpha = numbers["alpha_us"] * US
    kind = str(item.get("kind", ""))
    src, dst = item["src"], item["dst"]
    links = [Link(src, dst, bandwidth, alpha, kind)]
    if duplex:
        links.append(Link(dst, src, bandwidth, alpha, kind))
    return links


def to_dict(topology: Topology) -> dict[str, object]:
    """The file format's dict (one entry per directed link; reads back identically)."""
    return {
        "name": topology.name,
        "ranks": topology.num_ranks,
        "fabric": {name: kind.value for name, kind in topology.fabric.items()},
        "links": [{"src": lk.src, "dst": lk.dst, "bw_GBps": lk.bandwidth / GB_PER_S,
                   "alpha_us": lk.alpha / US, **({"kind": lk.kind} if lk.kind else {})}
                  for lk in topology.links],
        "groups": {kind: [list(p) for p in parts] for kind, parts in topology.groups.items()},
        "local_bw_GBps": topology.local_bandwidth / GB_PER_S,
        "source": topology.source,
        **({} if topology.cost.is_empty else {"cost_model": topology.cost.to_dict()}),
        **({} if topology.provenance.is_empty else
           {"provenance": topology.provenance.to_dict()}),
    }


def write(topology: Topology, path: str | Path) -> None:
    """Write ``topology`` as a topology file, atomically (a failed write keeps the old one)."""
    from ccweave import outfile

    outfile.write_text(path, json.dumps(to_dict(topology), indent=1) + "\n")
