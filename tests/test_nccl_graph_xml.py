"""The NCCL_GRAPH_FILE ccweave writes, read as NCCL's own parser reads it (src/graph/xml.cc's
xmlGetNode/xmlLoadSub, search.cc's ncclTopoGetGraphFromXmlSub and
ncclTopoGetChannelFromXml), and NCCL's graph dump read back into the model."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from ccweave.errors import InputError, NotApplicableError
from ccweave.nccl import constants as C
from ccweave.nccl import graph_xml
from ccweave.nccl.model import nccl_model
from ccweave.synth.rings import find_rings
from ccweave.topology import zoo

MAX_STR_LEN = 255  # xml.h
MAX_ATTR_COUNT = 16
MAX_SUBS = 640
HANDLERS = {None: {"graphs"}, "graphs": {"graph"}, "graph": {"channel"},
            "channel": {"net", "gpu"}, "net": set(), "gpu": set()}
"""Elements NCCL's graph loader handles under each parent (xml.cc); it ignores others."""
GRAPH_ATTRS = {"id", "crossnic", "pattern", "nchannels", "speedintra", "speedinter",
               "typeintra", "typeinter", "samechannels"}
"""What ncclTopoGetGraphFromXmlSub reads with xmlGetAttrInt/Float/Str (all required;
latencyinter is optional)."""
LINK_TYPES = {"LOC", "NVL", "NVB", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"}
"""search.cc's kvDictLinkType: what typeintra and typeinter may say."""


@dataclass
class Node:
    name: str
    attrs: dict[str, str]
    subs: list[Node] = field(default_factory=list)


class NcclParser:
    """xml.cc's reader, rule for rule: blanks are spaces and newlines only (no tabs), each
    attribute is ``key="value"`` after one space, values under 255 characters, comments
    ``<!-- -->``, elements closed by ``/>`` or their own closing tag."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def char(self) -> str:
        assert self.at < len(self.text), "XML Parse : Unexpected EOF"
        c = self.text[self.at]
        self.at += 1
        return c

    def token(self, value: bool) -> tuple[str, str | None, str]:
        name = ""
        while True:
            c = self.char()
            if c == "=":
                assert value, f"Unexpected value with name {name}"
                quote = self.char()
                assert quote in "\"'", "Expected (double) quote."
                text = ""
                while (c := self.char()) != quote:
                    text += c
                assert len(text) < MAX_STR_LEN, f"value {text} too long"
                return name, text, self.char()
            if c in " >/\n\r":
                assert len(name) < MAX_STR_LEN
                return name, None, c
            name += c

    def node(self) -> tuple[str, Node | None]:
        c = " "
        while c in " \n\r":
            if self.at == len(self.text):
                return "none", None
            c = self.char()
        assert c == "<", f"expecting '<', got {c!r}"
        name, _, c = self.token(False)
        if name.startswith("!--"):
            end = self.text.index("-->", self.at - 1)
            self.at = end + 3
            return self.node()
        if name == "" and c == "/":
            name, _, c = self.token(False)
            assert c == ">", f"unexpected trailing {c} in closing tag {name}"
            return "close", Node(name, {})
        attrs: dict[str, str] = {}
        while c == " ":
            key, value, c = self.token(True)
            assert value is not None, f"attribute {key} without a value"
            attrs[key] = value
        assert len(attrs) <= MAX_ATTR_COUNT
        kind = "open"
        if c == "/":
            kind = "single"
            _, _, c = self.token(False)
        assert c == ">", f"expected >, got {c!r}"
        return kind, Node(name, attrs)

    def load(self, head: Node | None = None, kind: str = "open") -> list[Node]:
        subs: list[Node] = []
        if kind == "single":
            return subs
        while True:
            kind_, node = self.node()
            if node is None:
                assert head is None, f"unterminated {head.name}"
                return subs
            if kind_ == "close":
                assert head is not None and node.name == head.name, "XML Mismatch"
                return subs
            allowed = HANDLERS[None if head is None else head.name]
            assert node.name in allowed, f"NCCL ignores <{node.name}> here"
            node.subs = self.load(node, kind_)
            assert len(node.subs) <= MAX_SUBS
            subs.append(node)


def parse(text: str) -> Node:
    roots = NcclParser(text).load()
    assert len(roots) == 1 and roots[0].name == "graphs"
    return roots[0]


@pytest.mark.parametrize("machine", ["dgx1", "dgx-a100", "dgx-h100", "cedar", "mist", "dgx2"])
def test_the_graph_file_is_what_nccl_s_parser_reads(machine):
    topology = zoo.get(machine)
    root = parse(graph_xml.render(graph_xml.graphs(topology), machine))
    assert int(root.attrs["version"], 0) == 1  # NCCL_GRAPH_XML_VERSION
    graphs = {int(g.attrs["id"], 0): g for g in root.subs}
    assert set(graphs) == {0, 1}
    assert int(graphs[0].attrs["pattern"]) == C.PATTERN_RING
    assert int(graphs[1].attrs["pattern"]) == C.PATTERN_BALANCED_TREE
    rings = {ring.order for ring in find_rings(topology, C.RING_MAX_CHANNELS)}
    for graph in graphs.values():
        assert set(graph.attrs) >= GRAPH_ATTRS
        assert {graph.attrs["typeintra"], graph.attrs["typeinter"]} <= LINK_TYPES
        assert float(graph.attrs["speedintra"]) > 0 and int(graph.attrs["crossnic"]) == 0
        assert int(graph.attrs["nchannels"], 0) == len(graph.subs) <= C.RING_MAX_CHANNELS
        orders = set()
        for channel in graph.subs:
            gpus = channel.subs
            assert all(g.name == "gpu" for g in gpus)
            # ncclTopoGetChannelFromXml: dev = strtol(dev, 16); rank = strtol(rank, 0)
            ranks = [int(g.attrs["rank"], 0) for g in gpus]
            assert [int(g.attrs["dev"], 16) for g in gpus] == ranks
            assert Counter(ranks) == Counter(range(topology.num_ranks))
            orders.add(tuple(ranks))
        assert orders == rings  # ccweave's rings, each at least once


def test_rings_are_repeated_in_proportion_to_their_bandwidth():
    """dgx1's rings get 50, 50, 25 and 25 GB/s: each fast ring twice, each slow one once."""
    found = graph_xml.graphs(zoo.get("dgx1"))
    counts = Counter(found.ring.orders)
    assert sorted(counts.values()) == [1, 1, 2, 2]
    assert found.ring_bandwidths == (50.0, 50.0, 25.0, 25.0)
    assert found.ring.bw_intra == 20.0  # 25 GB/s NVLink2 is 20 in NCCL's figures


def test_multi_node_is_refused_as_intra_node_only():
    with pytest.raises(NotApplicableError, match="intra-node only"):
        graph_xml.graphs(zoo.get("dgx-a100:2"))


def test_a_graph_dump_read_back_replaces_the_model_s_search(tmp_path):
    path = tmp_path / "graph.xml"
    written = graph_xml.write(path, zoo.get("dgx1"))
    read = graph_xml.read_graphs(path)
    assert read[0].orders == written.ring.orders and read[1].channels == written.tree.channels
    model = nccl_model(zoo.get("dgx1"), graphs=str(path))
    assert model.system.ring == read[0] and str(path) in model.system.graphs_from
    bad = tmp_path / "bad.xml"
    bad.write_text('<graphs version="2"></graphs>')
    with pytest.raises(InputError, match=r"version='2'>; NCCL 2\.30\.7 reads version 1"):
        graph_xml.read_graphs(bad)


@pytest.mark.parametrize("machine", ["dgx-a100", "dgx-h100", "dgx2"])
def test_one_ring_gets_the_channels_and_speed_nccl_s_search_gives_it(machine):
    """On an NVSwitch every ring is the same; ccweave's file then asks for what NCCL's own
    search finds (dgx-h100: 6 channels of 60 GB/s doubled to 12 of 30), not 32 slow ones."""
    from ccweave.nccl.system import nccl_system

    found = graph_xml.graphs(zoo.get(machine)).ring
    ring = nccl_system(zoo.get(machine)).ring
    assert (found.channels, found.bw_intra) == (ring.channels, ring.bw_intra)
