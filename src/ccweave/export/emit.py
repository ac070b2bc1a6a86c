"""Pass 5: print the laid-out steps as MSCCL XML (attributes in msccl-tools' order)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

from ccweave.export.dependencies import Step
from ccweave.export.lowering import Program
from ccweave.export.msccl_spec import BUFFER_CODE
from ccweave.export.threadblocks import Layout


def emit(program: Program, layout: Layout, steps: tuple[tuple[tuple[Step, ...], ...], ...],
         algo: Mapping[str, object], chunks: tuple[int, int, int]) -> str:
    """The XML text. ``algo``: the ``algo`` attributes before ``nchannels`` is added
    (name, proto, coll, ...); ``chunks``: i_chunks, o_chunks, s_chunks of every gpu."""
    return serialize(emit_tree(program, layout, steps, algo, chunks))


def emit_tree(program: Program, layout: Layout,
              steps: tuple[tuple[tuple[Step, ...], ...], ...], algo: Mapping[str, object],
              chunks: tuple[int, int, int]) -> ET.Element:
    """The ``algo`` element :func:`emit` prints."""
    channels = 1 + max((tb.chan for blocks in layout.tbs for tb in blocks), default=0)
    attrs = {"name": algo["name"], "proto": algo["proto"], "nchannels": channels,
             **{k: v for k, v in algo.items() if k not in ("name", "proto")}}
    root = ET.Element("algo", {k: str(v) for k, v in attrs.items()})
    for rank, blocks in enumerate(layout.tbs):
        gpu = ET.SubElement(root, "gpu", {"id": str(rank), "i_chunks": str(chunks[0]),
                                          "o_chunks": str(chunks[1]),
                                          "s_chunks": str(chunks[2])})
        for tb_id, tb in enumerate(blocks):
            elem = ET.SubElement(gpu, "tb", {"id": str(tb_id), "send": str(tb.send),
                                             "recv": str(tb.recv), "chan": str(tb.chan)})
            for s, step in enumerate(steps[rank][tb_id]):
                ET.SubElement(elem, "step", _step_attrs(program, s, step))
    return root


def serialize(root: ET.Element) -> str:
    """Indented, no XML declaration and ``<step .../>`` as msccl-tools prints it: the
    runtimes' hand-written parser reads ``<?xml`` as an element and refuses it."""
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode").replace(" />", "/>") + "\n"


def _step_attrs(program: Program, s: int, step: Step) -> dict[str, str]:
    if step.instr is None:
        code, src, dst, count = "nop", ("i", -1), ("o", -1), 0
    else:
        instr = program.instrs[step.instr]
        code, count = instr.code, instr.count
        src = (BUFFER_CODE[instr.src[0]], instr.src[1])
        dst = (BUFFER_CODE[instr.dst[0]], instr.dst[1])
    return {"s": str(s), "type": code, "srcbuf": src[0], "srcoff": str(src[1]),
            "dstbuf": dst[0], "dstoff": str(dst[1]), "cnt": str(count),
            "depid": str(step.depid), "deps": str(step.deps),
            "hasdep": "1" if step.hasdep else "0"}
