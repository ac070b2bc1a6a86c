"""Hypothesis strategies shared by the tests: random topologies and random schedules."""

from __future__ import annotations

from hypothesis import strategies as st

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.schedule import Schedule, ScheduleBuilder
from ccweave.topology.model import Link, NodeKind, Topology

GBPS = 1e9


@st.composite
def topologies(draw, min_ranks: int = 2, max_ranks: int = 8, switches: bool = True,
               max_extra_links: int = 12) -> Topology:
    """A random strongly connected topology: a ring over the ranks (so every rank reaches
    every other), optional switches with some ranks attached, and extra random links."""
    n = draw(st.integers(min_ranks, max_ranks))
    bandwidth = st.sampled_from([5.0, 12.5, 25.0, 50.0, 100.0]).map(lambda b: b * GBPS)
    alpha = st.sampled_from([0.0, 0.3e-6, 0.7e-6, 2.6e-6])
    links: list[Link] = []

    def duplex(a, b):
        bw, al = draw(bandwidth), draw(alpha)
        links.append(Link(a, b, bw, al))
        links.append(Link(b, a, bw, al))

    order = draw(st.permutations(list(range(n))))
    for i in range(n):
        if n > 1 and (n > 2 or i == 0):
            duplex(order[i], order[(i + 1) % n])
    fabric: dict[str, NodeKind] = {}
    if switches and n > 2:
        for s in range(draw(st.integers(0, 2))):
            name = f"sw{s}"
            fabric[name] = NodeKind.SWITCH
            members = draw(st.sets(st.integers(0, n - 1), min_size=2, max_size=n))
            for rank in sorted(members):
                duplex(rank, name)
    for _ in range(draw(st.integers(0, max_extra_links))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if a != b:
            links.append(Link(a, b, draw(bandwidth), draw(alpha)))
    return Topology(f"random{n}", n, tuple(links), fabric)


@st.composite
def slow_port_switches(draw, min_ranks: int = 2, max_ranks: int = 6) -> Topology:
    """Ranks on one switch whose ports differ, some much slower and some faster one way
    than the other, plus a few one-way direct links: the machines where allreduce's
    RS + AG is not a bound."""
    n = draw(st.integers(min_ranks, max_ranks))
    speeds = st.sampled_from([2.0, 10.0, 25.0, 50.0, 100.0]).map(lambda b: b * GBPS)
    alpha = st.sampled_from([0.0, 0.5e-6, 1e-6, 3e-6])
    links: list[Link] = []
    for rank in range(n):
        up = draw(speeds)
        down = up if draw(st.booleans()) else draw(speeds)
        links.append(Link(rank, "sw", up, draw(alpha)))
        links.append(Link("sw", rank, down, draw(alpha)))
    for _ in range(draw(st.integers(0, 3))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if a != b:
            links.append(Link(a, b, draw(speeds), draw(alpha)))
    return Topology(f"slowport{n}", n, tuple(links), {"sw": NodeKind.SWITCH})


@st.composite
def host_staged(draw, min_ranks: int = 2, max_ranks: int = 6) -> Topology:
    """GPU servers in miniature: every rank on one of one or two host CPUs (whose routes
    between ranks are staged through host memory), the CPUs linked, and random direct
    links between some ranks; the staging latency is 0 or 10 us."""
    from ccweave.topology.cost import CostModel

    n = draw(st.integers(min_ranks, max_ranks))
    speeds = st.sampled_from([8.0, 16.0, 25.0, 50.0]).map(lambda b: b * GBPS)
    alpha = st.sampled_from([0.0, 0.5e-6, 0.7e-6])
    cpus = draw(st.integers(1, 2))
    links: list[Link] = []
    for rank in range(n):
        cpu = f"cpu{draw(st.integers(0, cpus - 1))}"
        bw, al = draw(speeds), draw(alpha)
        links += [Link(rank, cpu, bw, al), Link(cpu, rank, bw, al)]
    if cpus == 2:
        bw, al = draw(speeds), draw(alpha)
        links += [Link("cpu0", "cpu1", bw, al), Link("cpu1", "cpu0", bw, al)]
    for _ in range(draw(st.integers(0, 2 * n))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if a != b:
            bw, al = draw(speeds), draw(alpha)
            links += [Link(a, b, bw, al), Link(b, a, bw, al)]
    used = {node for link in links for node in (link.src, link.dst) if isinstance(node, str)}
    cost = CostModel(staging_latency=draw(st.sampled_from([0.0, 10e-6])))
    return Topology(f"hosts{n}", n, tuple(links), dict.fromkeys(sorted(used), NodeKind.CPU),
                    cost=cost)


@st.composite
def topology_and_schedule(draw) -> tuple[Topology, Schedule]:
    """A random topology and a random schedule over pairs that have routes; the builder
    derives deps from the slots the transfers share, plus a few explicit ones."""
    topo = draw(topologies(max_ranks=6))
    n = topo.num_ranks
    pairs = [(a, b) for a in range(n) for b in range(n) if topo.has_route(a, b)]
    builder = ScheduleBuilder(Collective(Kind.ALLTOALL, n, 2))
    slots = 2 * n
    for _ in range(draw(st.integers(1, 24))):
        src, dst = draw(st.sampled_from(pairs))
        count = draw(st.integers(1, 3))
        src_slot = (draw(st.sampled_from([Buffer.INPUT, Buffer.SCRATCH])),
                    draw(st.integers(0, slots - count)))
        dst_slot = (draw(st.sampled_from([Buffer.OUTPUT, Buffer.SCRATCH])),
                    draw(st.integers(0, slots - count)))
        before = len(builder.transfers)
        after = draw(st.lists(st.integers(0, before - 1), max_size=2)) if before else []
        op = draw(st.sampled_from([builder.copy, builder.reduce]))
        op(src, dst, src_slot, dst_slot, count, after=after)
    return topo, builder.build("random")


# --------------------------------------------------------------- hostile inputs (fuzzing)

DEEP = "@@DEEP{}@@"
"""A placeholder value that :func:`json_text` turns into lists nested that deep (deeper
than ``json.dumps`` can write)."""


def hostile_values() -> st.SearchStrategy:
    """JSON values a hostile or careless file holds where a number or a name belongs:
    huge, negative and boundary integers, NaN and infinities, escape sequences, wrong
    types, deep nesting."""
    return st.one_of(
        st.integers(-3, 10),
        st.sampled_from([4095, 4096, 4097, 32768, 32769, 2**31, 2**63, 10**9, 10**18,
                         10**100, -2**63]),
        st.integers(-2**80, 2**80),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(["", "x", "0", "4", "ring:4", "\x1b[31mred\x1b]0;t\x07", "a\nb",
                         "[bold]x[/]", "i", "o", "s", "c", "r", "allgather", "1e999",
                         "\ud800", "\x08"]),
        st.text(max_size=12),
        st.none(), st.booleans(), st.just([]), st.just({}),
        st.lists(st.integers(-2, 70), max_size=4),
        st.sampled_from([10, 500, 5000, 100_000]).map(DEEP.format),
    )


@st.composite
def mutated(draw, document: object, max_edits: int = 3) -> object:
    """``document`` (parsed JSON) with a few edits: a value anywhere replaced by a
    :func:`hostile_values` one, a key or list entry deleted or repeated."""
    import copy

    data = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, max_edits))):
        containers = list(_containers(data))
        if not containers:
            return draw(hostile_values())
        holder = draw(st.sampled_from(containers))
        keys = list(holder) if isinstance(holder, dict) else list(range(len(holder)))
        if not keys:
            continue
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["set", "set", "set", "delete", "repeat"]))
        if action == "set":
            holder[key] = draw(hostile_values())
        elif action == "delete":
            del holder[key]
        elif isinstance(holder, list):
            holder.insert(key, copy.deepcopy(holder[key]))
    return data


def _containers(value: object, depth: int = 0):
    """Every dict and list inside ``value`` (not too deep, to keep the choice quick)."""
    if isinstance(value, (dict, list)) and depth < 6:
        yield value
        for item in (value.values() if isinstance(value, dict) else value):
            yield from _containers(item, depth + 1)


def json_text(data: object) -> str:
    """``data`` as JSON text (NaN and Infinity as Python writes them), deep placeholders
    expanded."""
    import json
    import re

    text = json.dumps(data, allow_nan=True)
    return re.sub(r'"@@DEEP(\d+)@@"', lambda m: "[" * int(m[1]) + "]" * int(m[1]), text)


def topology_specs() -> st.SearchStrategy[str]:
    """What people type for a zoo machine, right and wrong: names with sizes from tiny to
    absurd (but none that is valid and slow to build), odd separators, garbage."""
    small = st.integers(0, 40).map(str)
    absurd = st.sampled_from(["4097", "99999", "1000000000", "9" * 30, "9" * 5000,
                              "00000000000000000004", "-1", "1.5", "1e9", "x"])
    number = st.one_of(small, absurd)
    names = st.sampled_from(["ring", "fully-connected", "switch", "mesh", "torus",
                             "hypercube", "dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100",
                             "mist", "cedar", "nosuch", ""])
    dims = st.lists(number, min_size=1, max_size=4).map("x".join)
    return st.one_of(
        st.tuples(names, st.sampled_from([":", "", "::", ": "]), dims).map("".join),
        st.text(max_size=30),
    )


def size_texts() -> st.SearchStrategy[str]:
    """``--sizes`` values, right and wrong: sizes with units, ranges with factors near
    1, huge and non-finite numbers, garbage."""
    number = st.one_of(st.integers(0, 4096).map(str),
                       st.sampled_from(["1" + "0" * 400, "0.5", "1.5", "9" * 30, "nan",
                                        "inf", "-1", "1e3", ""]))
    size = st.tuples(number, st.sampled_from(["", "B", "KB", "MB", "GB", "TB", "K", "PB",
                                              "kb", " MB", "x"])).map("".join)
    factor = st.sampled_from(["2", "1.5", "1.0000001", "1", "0.5", "nan", "inf", "abc",
                              "1e3", "1" + "0" * 400, "32"])
    return st.one_of(
        st.lists(size, min_size=1, max_size=4).map(",".join),
        st.tuples(size, size).map(":".join),
        st.tuples(size, size, factor).map(":".join),
        st.text(max_size=20),
    )


# --- bare PCI trees, as an NCCL_TOPO_FILE of class codes ------------------------------

PCI_SPEEDS = {"2.5 GT/s PCIe": 1, "8.0 GT/s PCIe": 3, "16.0 GT/s PCIe": 4, "32.0 GT/s PCIe": 5,
              "Unknown": 3}
"""link_speed texts and the PCIe generation NCCL reads (an unknown text is Gen3)."""


@st.composite
def pci_trees(draw, nics: int | None = None, max_depth: int = 3) -> tuple[str, dict]:
    """NCCL topology XML holding only a PCI tree (GPUs and NICs by class code, as Azure
    ships its NCCL_TOPO_FILE), and what an importer must find in it: ``gpus``, ``nics``,
    ``slow_bridges`` (bridges above a GPU or NIC whose own link is slower than the fastest
    device below them), ``missing`` (an attribute left out, or None). ``nics`` fixes how
    many NICs the tree holds (spread over random places)."""
    counter = iter(range(1, 10_000))
    facts = {"gpus": 0, "nics": 0, "slow_bridges": 0}

    def link() -> tuple[str, int, float]:
        speed = draw(st.sampled_from(sorted(PCI_SPEEDS)))
        width = draw(st.sampled_from([0, 1, 4, 8, 16]))
        return speed, width, 0.25 * 2 ** (PCI_SPEEDS[speed] - 1) * (width or 16)

    def element(kind: str, depth: int) -> tuple[str, float | None]:
        """XML of one device (and its subtree); the fastest GPU/NIC link at or below it."""
        speed, width, gbps = link()
        busid = f"{next(counter):04x}:00:00.0"
        classes = {"gpu": "0x030200", "nic": draw(st.sampled_from(["0x020700", "0x020000"])),
                   "bmc": "0x030000", "nvme": "0x010802", "unknown": "0x0c0330",
                   "bridge": "0x060400"}
        vendor = ' vendor="0x1a03"' if kind == "bmc" else ""
        head = (f'<pci busid="{busid}" class="{classes[kind]}"{vendor} link_speed="{speed}" '
                f'link_width="{width}"')
        if kind in ("gpu", "nic"):
            facts[kind + "s"] += 1
            return head + "/>", gbps
        if kind != "bridge" or depth >= max_depth:
            return head + "/>", None
        children = [element(child, depth + 1) for child in draw(st.lists(
            st.sampled_from(["gpu", "gpu", "nic", "bridge", "bmc", "nvme", "unknown"]),
            max_size=3))]
        below = [found for _, found in children if found is not None]
        if below and gbps < max(below):
            facts["slow_bridges"] += 1
        return head + ">" + "".join(xml for xml, _ in children) + "</pci>", \
            max(below) if below else None

    sockets = []
    for numa in range(draw(st.integers(1, 2))):
        kinds = draw(st.lists(st.sampled_from(["gpu", "bridge", "bridge", "nic", "nvme"]),
                              min_size=1, max_size=3))
        body = "".join(element(kind, 1)[0] for kind in kinds)
        sockets.append(f'<cpu numaid="{numa}" arch="x86_64" vendor="GenuineIntel" '
                       f'familyid="6" modelid="143">{body}</cpu>')
    if nics is not None:
        extra = "".join(element("nic", 1)[0] for _ in range(max(0, nics - facts["nics"])))
        sockets[0] = sockets[0].replace("</cpu>", extra + "</cpu>")
    text = '<system version="1">' + "".join(sockets) + "</system>"
    facts["missing"] = None
    if draw(st.booleans()) and draw(st.booleans()):  # a quarter: one attribute left out
        attribute = draw(st.sampled_from(["class", "busid", "link_speed", "link_width"]))
        occurrences = text.count(f" {attribute}=")
        if occurrences:
            which = draw(st.integers(0, occurrences - 1))
            parts = text.split(f" {attribute}=")
            value_end = parts[which + 1].index('"', 1) + 1
            parts[which + 1] = parts[which + 1][value_end:]
            text = "".join(part if number == 0 else
                           (f" {attribute}=" + part if number != which + 1 else part)
                           for number, part in enumerate(parts))
            facts["missing"] = attribute
    return text, facts
