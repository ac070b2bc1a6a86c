"""What a communication sketch is: which links a collective may use, how switches are
treated, which GPUs relay across nodes, the symmetry to keep, and how finely inputs are
cut (TACCL's concepts, arXiv 2111.04867, section 4), and ccweave's own JSON form of it
(``docs/sketches.md``). Reading any sketch file is :mod:`ccweave.synth.taccl.sketch`'s;
TACCL's own spelling is :mod:`ccweave.synth.taccl.sketch_taccl`'s. Every error names
the file and the field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ccweave.errors import InputError

MAX_CHUNKUP = 64
"""Largest ``input_chunkup``: beyond it the solver stages grow without a useful gain."""


class Intranode(str, enum.Enum):
    """Which rank-to-rank connections inside a node a schedule may use."""

    LINKS = "links"
    """Only pairs joined by one direct link (NVLink meshes): others relay through ranks."""
    SWITCH = "switch"
    """Pairs whose route crosses a switch (NVSwitch): every pair, one hop, shared ports."""
    ROUTES = "routes"
    """Every pair with a route (PCIe, host bridges included)."""
    NONE = "none"
    """No restriction beyond the machine's own GPU links, as TACCL's ``none``: direct links
    where they hold each node together, else the switch, else every route."""


class Hyperedge(str, enum.Enum):
    """How many distinct peers a rank should talk to through a switch (TACCL's policy).

    ``uc-max`` spreads chunks over as many connections as the makespan allows (more
    parallel streams); ``uc-min`` uses as few as it allows (fewer connections to set up,
    each carrying more). Either is a tie-break after the makespan.
    """

    UC_MAX = "uc-max"
    UC_MIN = "uc-min"


class Balance(str, enum.Enum):
    """TACCL's link-load objectives (its intranode strategies ``minmax`` and ``maxmin``): a
    term beside the makespan in the routing MILP, weighted by TACCL's ``mu``."""

    MINMAX = "minmax"
    """Minimise the most loaded link: spread load off the busiest links."""
    MAXMIN = "maxmin"
    """Maximise the least loaded link: bring idle links into use."""


class Connections(str, enum.Enum):
    """Named internode maps; an explicit map is a dict instead."""

    FULLY_CONNECTED = "fully-connected"
    """Every sender may send to every receiver of another node."""
    DIRECT_MAP = "direct-map"
    """Sender with local rank ``i`` sends only to local rank ``i`` of another node."""


@dataclass(frozen=True)
class IntranodeSketch:
    """Links inside a node: the strategy, the switch policy and the switch groups."""

    strategy: Intranode = Intranode.LINKS
    hyperedge: Hyperedge | None = None
    switches: tuple[tuple[int, ...], ...] = ()
    """Groups of local ranks that each form one switch (default: the whole node)."""
    balance: Balance | None = None
    """TACCL's ``minmax``/``maxmin`` link-load objective, if any."""


@dataclass(frozen=True)
class InternodeSketch:
    """Relays across nodes: who sends to whom, and whose data each sender carries.

    ``connections`` maps a sender's local rank to the local ranks it may send to in
    every other node. ``carries`` maps a sender to the local ranks whose data it
    takes out of the node (TACCL's ``gpus_to_sender_rev_map``); empty means every
    sender carries anyone's data. GPUs that share a NIC share its bandwidth: the
    routing stage sees that on the NIC's links.
    """

    connections: tuple[tuple[int, tuple[int, ...]], ...] | Connections = Connections.DIRECT_MAP
    senders: tuple[int, ...] | None = None
    """Local ranks that send across nodes (named maps only; default every local rank)."""
    receivers: tuple[int, ...] | None = None
    """Local ranks that receive across nodes (named maps only; default the senders)."""
    carries: tuple[tuple[int, tuple[int, ...]], ...] = ()
    enforce_ordering: bool = False
    """TACCL's ``enforce_ordering``: a sender puts its own chunks on its internode
    connections before the chunks it carries for others."""


@dataclass(frozen=True)
class Sketch:
    """A communication sketch (TACCL section 4).

    Parameters
    ----------
    intranode: which connections inside a node may carry chunks.
    internode: which ranks relay chunks across nodes and to whom.
    symmetry_offsets: ``((offset, group_size), ...)``: rotating ranks by ``offset``
        inside consecutive groups of ``group_size`` maps the schedule onto itself; the
        solver works on one representative per orbit.
    input_chunkup: chunks each rank's input is cut into.
    nodes: the number of nodes the sketch is written for (TACCL's ``nnodes``); ``None``:
        any. A topology with another number of nodes is refused.
    name, description, source: for people (``source``: the file it came from).
    """

    intranode: IntranodeSketch = IntranodeSketch()
    internode: InternodeSketch = InternodeSketch()
    symmetry_offsets: tuple[tuple[int, int], ...] = ()
    input_chunkup: int = 1
    nodes: int | None = None
    name: str = "sketch"
    description: str = ""
    source: str = "sketch"
    taccl_keys: bool = False
    """Whether the file was TACCL's: errors then name TACCL's keys (:meth:`field`)."""

    def field(self, name: str) -> str:
        """How the user's file spells ccweave field ``name`` (``internode.carries`` is
        ``internode_sketch.gpus_to_sender_rev_map`` in a TACCL sketch)."""
        return TACCL_KEYS.get(name, name) if self.taccl_keys else name

    def to_dict(self) -> dict[str, object]:
        """The JSON form :func:`from_dict` reads back."""
        intra: dict[str, object] = {"strategy": self.intranode.strategy.value}
        if self.intranode.hyperedge is not None:
            intra["hyperedge"] = self.intranode.hyperedge.value
        if self.intranode.switches:
            intra["switches"] = [list(group) for group in self.intranode.switches]
        if self.intranode.balance is not None:
            intra["balance"] = self.intranode.balance.value
        inter: dict[str, object] = {"strategy": "relay"}
        conn = self.internode.connections
        inter["connections"] = conn.value if isinstance(conn, Connections) else \
            {str(s): list(r) for s, r in conn}
        if self.internode.senders is not None:
            inter["senders"] = list(self.internode.senders)
        if self.internode.receivers is not None:
            inter["receivers"] = list(self.internode.receivers)
        if self.internode.carries:
            inter["carries"] = {str(s): list(r) for s, r in self.internode.carries}
        if self.internode.enforce_ordering:
            inter["enforce_ordering"] = True
        data: dict[str, object] = {
            "name": self.name, "description": self.description, "intranode": intra,
            "internode": inter,
            "symmetry_offsets": [list(pair) for pair in self.symmetry_offsets],
            "input_chunkup": self.input_chunkup}
        if self.nodes is not None:
            data["nodes"] = self.nodes
        return data


TACCL_KEYS = {
    "nodes": "nnodes",
    "intranode.strategy": "intranode_sketch.strategy",
    "intranode.switches": "intranode_sketch.switches",
    "intranode.hyperedge": "intranode_sketch.switch_hyperedge_strategy",
    "internode.connections": "internode_sketch.internode_conn",
    "internode.senders": "internode_sketch.internode_conn",
    "internode.receivers": "internode_sketch.internode_conn",
    "internode.senders/receivers": "internode_sketch.internode_conn",
    "internode.carries": "internode_sketch.gpus_to_sender_rev_map",
    "internode.enforce_ordering": "internode_sketch.enforce_ordering",
    "input_chunkup": "hyperparameters.input_chunkup",
}
"""ccweave's sketch fields as TACCL's sketch files spell them."""

_TOP_FIELDS = {"name", "description", "intranode", "internode", "symmetry_offsets",
               "input_chunkup", "nodes", "comment"}
_INTRA_FIELDS = {"strategy", "hyperedge", "switches", "balance"}
_INTER_FIELDS = {"strategy", "connections", "senders", "receivers", "carries",
                 "enforce_ordering"}


def from_ccweave(data: Mapping, source: str = "sketch") -> Sketch:
    """A :class:`Sketch` from ccweave's own JSON form (docs/sketches.md), naming
    ``source`` and the field on error."""
    no_unknown(data, _TOP_FIELDS, source, "")
    name = data.get("name", Path(source).stem if source != "sketch" else "sketch")
    description = data.get("description", "")
    for field, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise InputError(f"{source}: {field} must be a string, got {value!r}")
    return Sketch(
        intranode=_intranode(data.get("intranode", {}), source),
        internode=_internode(data.get("internode", {}), source),
        symmetry_offsets=symmetry_offsets(data.get("symmetry_offsets", []), source),
        input_chunkup=chunkup(data.get("input_chunkup", 1), source),
        nodes=node_count(data.get("nodes"), source, "nodes"),
        name=name, description=description, source=source)


def node_count(value: object, source: str, field: str) -> int | None:
    """A sketch's number of nodes (``None`` if not given), checked."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{source}: {field} is {value!r}; give the number of nodes the "
                         "sketch is for, an integer >= 1")
    return value


def no_unknown(data: Mapping, known: set[str], source: str, prefix: str) -> None:
    """Refuse fields not in ``known`` (a typo should not be ignored), naming the first."""
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"{source}: unknown field '{prefix}{unknown[0]}'; known fields: "
                         + ", ".join(f"{prefix}{k}" for k in sorted(known - {"comment"})))


def choice(value: object, enum_type: type[enum.Enum], source: str, field: str) -> enum.Enum:
    """``value`` as a member of ``enum_type``, or an error listing the members."""
    try:
        return enum_type(value)
    except ValueError:
        raise InputError(f"{source}: {field} is {value!r}; use one of "
                         + ", ".join(repr(m.value) for m in enum_type)) from None


def _intranode(data: object, source: str) -> IntranodeSketch:
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: intranode must be an object like "
                         '{"strategy": "switch", "hyperedge": "uc-min"}')
    no_unknown(data, _INTRA_FIELDS, source, "intranode.")
    strategy = choice(data.get("strategy", "links"), Intranode, source, "intranode.strategy")
    hyperedge = data.get("hyperedge")
    if hyperedge is not None:
        if strategy is not Intranode.SWITCH:
            raise InputError(f"{source}: intranode.hyperedge applies to the 'switch' strategy "
                             f"only; drop it or set intranode.strategy to 'switch'")
        hyperedge = choice(hyperedge, Hyperedge, source, "intranode.hyperedge")
    switches = data.get("switches", [])
    if switches and strategy is not Intranode.SWITCH:
        raise InputError(f"{source}: intranode.switches applies to the 'switch' strategy only")
    groups = tuple(local_ranks(group, source, f"intranode.switches[{i}]", min_size=2)
                   for i, group in enumerate(as_list(switches, source, "intranode.switches")))
    seen: set[int] = set()
    for i, group in enumerate(groups):
        twice = seen.intersection(group)
        if twice:
            raise InputError(f"{source}: intranode.switches[{i}]: local rank {min(twice)} is "
                             "in two switch groups; each rank is on one switch")
        seen.update(group)
    balance = data.get("balance")
    if balance is not None:
        balance = choice(balance, Balance, source, "intranode.balance")
    return IntranodeSketch(strategy, hyperedge, groups, balance)  # type: ignore[arg-type]


def _internode(data: object, source: str) -> InternodeSketch:
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: internode must be an object like "
                         '{"strategy": "relay", "connections": "direct-map"}')
    no_unknown(data, _INTER_FIELDS, source, "internode.")
    if data.get("strategy", "relay") != "relay":
        raise InputError(f"{source}: internode.strategy is {data.get('strategy')!r}; the only "
                         "internode strategy is 'relay'")
    raw = data.get("connections", Connections.DIRECT_MAP.value)
    senders = data.get("senders")
    receivers = data.get("receivers")
    connections: tuple[tuple[int, tuple[int, ...]], ...] | Connections
    if isinstance(raw, str):
        connections = choice(raw, Connections, source, "internode.connections")  # type: ignore
        senders = None if senders is None else local_ranks(senders, source, "internode.senders")
        receivers = None if receivers is None else \
            local_ranks(receivers, source, "internode.receivers")
    elif isinstance(raw, Mapping):
        if senders is not None or receivers is not None:
            raise InputError(f"{source}: internode.senders and internode.receivers go with a "
                             "named map ('fully-connected', 'direct-map'); an explicit "
                             "connections map already names both")
        connections = rank_map(raw, source, "internode.connections")
        if not connections:
            raise InputError(f"{source}: internode.connections is an empty map; name at least "
                             'one sender, e.g. {"0": [0]}')
    else:
        raise InputError(f"{source}: internode.connections must be 'fully-connected', "
                         "'direct-map' or a map from sender local rank to receiver local "
                         'ranks, e.g. {"1": [0]}')
    carries = rank_map(data.get("carries", {}), source, "internode.carries")
    enforce = data.get("enforce_ordering", False)
    if not isinstance(enforce, bool):
        raise InputError(f"{source}: internode.enforce_ordering must be true or false, got "
                         f"{enforce!r}")
    return InternodeSketch(connections, senders, receivers, carries, enforce)


def rank_map(raw: object, source: str, field: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """A JSON map from local rank (a string key) to local ranks, sorted by key."""
    if not isinstance(raw, Mapping):
        raise InputError(f"{source}: {field} must be a map from local rank to local ranks, "
                         'e.g. {"1": [0, 1]}')
    pairs = []
    for key, value in raw.items():
        try:
            rank = int(key)
        except (TypeError, ValueError):
            rank = -1
        if rank < 0 or str(rank) != str(key).strip():
            raise InputError(f"{source}: {field} key {key!r} is not a local rank (an integer "
                             ">= 0 written as a string, e.g. \"1\")")
        pairs.append((rank, local_ranks(value, source, f"{field}[{key!r}]")))
    return tuple(sorted(pairs))


def as_list(value: object, source: str, field: str) -> list:
    """``value`` if it is a list, else an error naming ``field``."""
    if not isinstance(value, list):
        raise InputError(f"{source}: {field} must be a list, got {value!r}")
    return value


def local_ranks(value: object, source: str, field: str, min_size: int = 1) -> tuple[int, ...]:
    """A list of distinct local ranks (integers >= 0)."""
    items = as_list(value, source, field)
    if len(items) < min_size:
        raise InputError(f"{source}: {field} needs at least {min_size} local rank(s)")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise InputError(f"{source}: {field} holds {item!r}; local ranks are integers >= 0")
    if len(set(items)) != len(items):
        raise InputError(f"{source}: {field} names a local rank twice")
    return tuple(items)


def symmetry_offsets(value: object, source: str) -> tuple[tuple[int, int], ...]:
    """``[[offset, group_size], ...]``, each checked (same field name in TACCL's files)."""
    pairs = []
    for i, pair in enumerate(as_list(value, source, "symmetry_offsets")):
        field = f"symmetry_offsets[{i}]"
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)):
            raise InputError(f"{source}: {field} is {pair!r}; write [offset, group_size], "
                             "e.g. [8, 16]")
        offset, size = pair
        if size < 2 or not 0 < offset < size:
            raise InputError(f"{source}: {field} = {pair}: need 0 < offset < group_size and "
                             "group_size >= 2")
        pairs.append((offset, size))
    return tuple(pairs)


def chunkup(value: object, source: str, field: str = "input_chunkup") -> int:
    """Chunks per rank, 1 to :data:`MAX_CHUNKUP`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CHUNKUP:
        raise InputError(f"{source}: {field} is {value!r}; use an integer from 1 to "
                         f"{MAX_CHUNKUP}")
    return value
