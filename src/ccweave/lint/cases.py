"""Lint's evidence: for each rule, a correct algorithm and call the runtime runs, and one
edit (to the file, the call or the environment) that breaks that rule alone.

The correct algorithms are upstream's own files: MSCCL XML printed by msccl-tools'
example programs and MSCCL++'s test plans (``../shared/fixtures``). For RCCL and the Azure
executor the XML gets the header attributes their parser requires (``minBytes="0"
maxBytes="0"`` and ``outofplace`` the opposite of ``inplace``, as RCCL's own
``tools/msccl-algorithms`` files carry them).
``tests/test_lint.py`` and ``benchmarks/gpu_stacks.py`` (section ``lint``) run them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ccweave.lint.model import Call, Runtime

XML_BASE = "allreduce_ring_8.xml"
"""An 8-rank in-place allreduce ring, nchunksperloop 8, proto LL128."""
PLAN_BASE = "allreduce.json"
"""MSCCL++'s 2-rank in-place Simple allreduce, 16 chunks, alignment 16."""
MB = 2**20


@dataclass(frozen=True)
class Case:
    """One rule's breaker: ``edit`` says what was changed (``file:``, ``call:``, ``env:``)."""

    runtime: Runtime
    rule: str
    edit: str
    path: Path
    call: Call


def set_attributes(text: str, element: str = "algo", **values: str) -> str:
    """``text`` with the first ``<element ...>`` tag's attributes set (replaced or added)."""
    match = re.search(rf"<{element}\b[^>]*>", text)
    if match is None:
        raise ValueError(f"no <{element}> element")
    tag = match.group(0)
    for name, value in values.items():
        if re.search(rf'\s{name}="[^"]*"', tag):
            tag = re.sub(rf'(\s{name}=)"[^"]*"',
                         lambda m, v=value: f'{m.group(1)}"{v}"', tag)
        else:
            tag = tag[:-1] + f' {name}="{value}">'
    return text[:match.start()] + tag + text[match.end():]


def xml_baseline(runtime: Runtime, source: Path) -> str:
    """The fixture's text as ``runtime`` needs it: RCCL and Azure's header attributes."""
    text = source.read_text()
    if runtime is Runtime.MSCCL:
        return text
    inplace = re.search(r'<algo\b[^>]*\sinplace="1"', text) is not None
    return set_attributes(text, minBytes="0", maxBytes="0", outofplace=str(int(not inplace)))


def xml_call(runtime: Runtime, path: Path, ranks: int = 8) -> Call:
    """A call the baseline serves: in place, sums, 1 MB and 64 MB float32, one process per
    GPU, and an environment that turns the runtime on."""
    env = {Runtime.RCCL: {"RCCL_MSCCL_FORCE_ENABLE": "1"},
           Runtime.AZURE: {},
           Runtime.MSCCL: {"NCCL_ALGO": "MSCCL,Ring,Tree", "MSCCL_XML_FILES": str(path),
                           "NCCL_PROTO": "LL,LL128,Simple"}}[runtime]
    return Call(ranks=ranks, sizes=(MB, 64 * MB), inplace=True, env=env)


def plan_call(data: dict) -> Call:
    """A call an MSCCL++ plan serves: its ranks and buffer mode, 1 MB float32, sum."""
    return Call(ranks=len(data["gpus"]), sizes=(MB,), inplace=bool(data["inplace"]), env={})


_Edit = Callable[[str], str]


def _xml_cases(runtime: Runtime) -> list[tuple[str, str, _Edit | None, Callable[[Call], Call]]]:
    """(rule, what is changed, file edit, call edit) for one MSCCL runtime."""
    same: Callable[[Call], Call] = lambda c: c  # noqa: E731
    cases: list[tuple[str, str, _Edit | None, Callable[[Call], Call]]] = [
        ("ranks", "call: 16 ranks", None, lambda c: replace(c, ranks=16)),
        ("chunks", "call: 1 MB + 4 B (262145 elements, nchunksperloop 8)", None,
         lambda c: replace(c, sizes=(MB + 4,))),
        ("size", 'file: maxBytes="65536"',
         lambda t: set_attributes(t, maxBytes="65536"), same),
        ("in-place", 'file: inplace="0" outofplace="1"' if runtime is not Runtime.MSCCL
         else 'file: inplace="0"',
         lambda t: set_attributes(t, inplace="0", **({} if runtime is Runtime.MSCCL
                                                     else {"outofplace": "1"})), same),
        ("op", "call: --op avg", None, lambda c: replace(c, op="avg")),
        ("loads", 'file: a step of type="zz"',
         lambda t: set_attributes(t, "step", type="zz"), same),
    ]
    if runtime is Runtime.MSCCL:
        env = {"NCCL_ALGO": "MSCCL,Ring,Tree", "NCCL_PROTO": "LL,LL128,Simple"}
        cases += [
            ("attributes", 'file: coll="reducescatter" (RCCL\'s spelling)',
             lambda t: set_attributes(t, coll="reducescatter"), same),
            ("enabled", "env: NCCL_ALGO unset", None,
             lambda c: replace(c, env={k: v for k, v in (c.env or {}).items()
                                       if k != "NCCL_ALGO"})),
            ("protocol", "env: NCCL_PROTO=Simple (the file is LL128)", None,
             lambda c: replace(c, env={**(c.env or env), "NCCL_PROTO": "Simple"})),
            ("channels", 'file: nchannels="40"',
             lambda t: set_attributes(t, nchannels="40"), same),
        ]
        return cases
    cases += [
        ("attributes", "file: maxBytes removed",
         lambda t: re.sub(r'\smaxBytes="[^"]*"', "", t, count=1), same),
        ("processes", "call: 8 ranks per process", None,
         lambda c: replace(c, ranks_per_process=8)),
    ]
    if runtime is Runtime.RCCL:
        cases += [
            ("enabled", "env: RCCL_MSCCL_ENABLE=0", None,
             lambda c: replace(c, env={**(c.env or {}), "RCCL_MSCCL_ENABLE": "0"})),
            ("channels", 'file: nchannels="2", env: NCCL_MAX_NCHANNELS=1',
             lambda t: set_attributes(t, nchannels="2"),
             lambda c: replace(c, env={**(c.env or {}), "NCCL_MAX_NCHANNELS": "1"})),
        ]
    else:
        cases.append(("enabled", "env: NCCL_MSCCL_ENABLE=0", None,
                      lambda c: replace(c, env={**(c.env or {}), "NCCL_MSCCL_ENABLE": "0"})))
    return cases


def crafted(runtime: Runtime, fixtures: Path, work: Path) -> list[Case]:
    """One case per rule of ``runtime``, its files written under ``work``.

    Parameters
    ----------
    fixtures: ``../shared/fixtures`` (its ``msccl/`` and ``mscclpp/plans/``).
    work: an empty directory for the crafted files.
    """
    work.mkdir(parents=True, exist_ok=True)
    if runtime is Runtime.MSCCLPP:
        return _plan_cases(fixtures / "mscclpp" / "plans" / PLAN_BASE, work)
    base = xml_baseline(runtime, fixtures / "msccl" / XML_BASE)
    cases = []
    for rule, edit, file_edit, call_edit in _xml_cases(runtime):
        path = work / f"{runtime.value}-{rule}.xml"
        path.write_text(file_edit(base) if file_edit else base)
        cases.append(Case(runtime, rule, edit, path, call_edit(xml_call(runtime, path))))
    return cases


def _plan_cases(source: Path, work: Path) -> list[Case]:
    base = json.loads(source.read_text())
    call = plan_call(base)
    edits: list[tuple[str, str, dict, Call]] = [
        ("collective", 'file: collective "reduce_scatter"', {"collective": "reduce_scatter"},
         call),
        ("ranks", "call: 4 ranks", {}, replace(call, ranks=4)),
        ("size", "file: max_message_size 65536", {"max_message_size": 65536}, call),
        ("in-place", "file: inplace false", {"inplace": False}, call),
        ("chunks", "call: 1 MB + 16 B (alignment 16 x 16 chunks)", {},
         replace(call, sizes=(MB + 16,))),
        ("dtype", "call: --dtype int8", {}, replace(call, dtype="int8")),
        ("op", "call: --op avg", {}, replace(call, op="avg")),
        ("enabled", "env: MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION=allreduce", {},
         replace(call, env={"MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION": "allreduce",
                            "MSCCLPP_NCCL_LIB_PATH": "/usr/lib/libnccl.so.2"})),
    ]
    cases = []
    for rule, edit, fields, case_call in edits:
        path = work / f"mscclpp-{rule}.json"
        path.write_text(json.dumps({**base, **fields}))
        cases.append(Case(Runtime.MSCCLPP, rule, edit, path, case_call))
    return cases


def correct(runtime: Runtime, fixtures: Path, work: Path) -> list[tuple[Path, Call]]:
    """Every upstream file ``runtime`` reads, as its baseline, with a call it serves:
    its own ranks and buffer mode, sizes that are multiples of its chunks."""
    work.mkdir(parents=True, exist_ok=True)
    found = []
    if runtime is Runtime.MSCCLPP:
        for source in sorted((fixtures / "mscclpp" / "plans").glob("*.json")):
            data = json.loads(source.read_text())
            align = data.get("buffer_alignment", 16)
            chunks = max(max(g["input_chunks"], g["output_chunks"]) for g in data["gpus"])
            size = align * chunks * len(data["gpus"]) * 1024
            found.append((source, replace(plan_call(data), sizes=(size,))))
        return found
    for source in sorted((fixtures / "msccl").glob("*.xml")):
        path = work / f"{runtime.value}-{source.name}"
        text = xml_baseline(runtime, source)
        path.write_text(text)
        algo = re.search(r"<algo\b[^>]*>", text).group(0)  # type: ignore[union-attr]
        ngpus = int(re.search(r'ngpus="(\d+)"', algo).group(1))  # type: ignore[union-attr]
        chunks = int(re.search(r'nchunksperloop="(\d+)"', algo).group(1))  # type: ignore
        inplace = re.search(r'\sinplace="1"', algo) is not None
        call = replace(xml_call(runtime, path, ngpus), inplace=inplace,
                       sizes=(chunks * 4 * 1024,))
        found.append((path, call))
    return found
