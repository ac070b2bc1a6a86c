"""The conditions under which an MSCCL runtime runs an MSCCL XML algorithm, and the findings
where a file, the job's calls or its environment break one.

Read from the runtimes' own code (commits in docs/lint.md):

- RCCL (ROCm/rccl 0cbce2a): ``src/misc/msccl/msccl_parser.cc`` ``mscclGetAlgoMetaFromXmlFile``
  reads each file's header; ``src/misc/msccl/msccl_lifecycle.cc``
  ``mscclInternalSchedulerSelectAlgo`` picks an algorithm per call, and
  ``mscclSchedulerSelectAlgo``, ``mscclCommCompatible``, ``mscclEnabled`` gate it;
  ``src/graph/connect.cc`` ignores ``mscclSchedulerInit``'s failure.
- The Azure executor (Azure/msccl-executor-nccl c6f6b36): the same files and functions,
  without RCCL's machine table and channel cap.
- microsoft/msccl (b23e9cd): ``src/graph/tuning.cc`` ``ncclTopoGetMSCCLAlgo`` per call
  (alltoall: ``src/collectives/all_to_all.cc``), ``src/graph/topo.cc``
  ``mscclGetAlgoFromXMLAndSetAlgo`` per file, ``src/misc/argcheck.cc`` for the counts.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path

from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.export import msccl_spec
from ccweave.export.xml_check import check_xml
from ccweave.export.xml_import import parse_document
from ccweave.export.xml_lexer import lex_check
from ccweave.lint.model import Call, Finding, Report, Rule, Runtime, env_int, sizes_text
from ccweave.units import format_size

RCCL_LIFE = "ROCm/rccl src/misc/msccl/msccl_lifecycle.cc"
RCCL_PARSER = "ROCm/rccl src/misc/msccl/msccl_parser.cc"
AZURE_LIFE = "Azure/msccl-executor-nccl src/misc/msccl/msccl_lifecycle.cc"
AZURE_PARSER = "Azure/msccl-executor-nccl src/misc/msccl/msccl_parser.cc"
MS_TUNING = "microsoft/msccl src/graph/tuning.cc"
MS_TOPO = "microsoft/msccl src/graph/topo.cc"

META_ATTRIBUTES = ("nchunksperloop", "nchannels", "ngpus", "coll", "minBytes", "maxBytes",
                   "inplace", "outofplace")
"""What ``mscclGetAlgoMetaFromXmlFile`` reads (RCCL, Azure); a missing one fails the scan."""
MS_DEFAULT_MAX_BYTES = 1 << 27
"""microsoft/msccl's ``maxBytes`` when a file has none (``topo.cc``: 128 MB)."""
MS_MAX_CHANNELS = 32
"""microsoft/msccl's ``MAXCHANNELS`` (``src/include/devcomm.h``)."""
SIZE_MULTIPLIED = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL)
"""``sizeMultiplier = nGpus``: the call's count is per rank, the runtime's size is the whole
buffer (RCCL, Azure ``msccl_parser.cc``; microsoft/msccl ``argcheck.cc``)."""
REDUCING = (Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.REDUCE)

_RCCL_NAMES = {"reduce": Kind.REDUCE, "broadcast": Kind.BROADCAST, "allreduce": Kind.ALLREDUCE,
               "reducescatter": Kind.REDUCESCATTER, "allgather": Kind.ALLGATHER,
               "gather": Kind.GATHER, "scatter": Kind.SCATTER, "alltoall": Kind.ALLTOALL}
"""``coll`` as ``mscclGetAlgoMetaFromXmlFile`` reads it (send, recv, alltoallv: not linted)."""
_MS_NAMES = {"allreduce": Kind.ALLREDUCE, "allgather": Kind.ALLGATHER, "reduce": Kind.REDUCE,
             "broadcast": Kind.BROADCAST, "alltoall": Kind.ALLTOALL,
             "reduce_scatter": Kind.REDUCESCATTER}
"""``coll`` as microsoft/msccl's ``topo.cc`` reads it (``custom``: not linted further)."""


def _rules() -> dict[Runtime, tuple[Rule, ...]]:
    shared = {
        "ranks": "the communicator has ngpus ranks",
        "chunks": "each call's element count (the whole buffer's) is a multiple of "
                  "nchunksperloop",
        "size": "each call's size lies in minBytes..maxBytes (maxBytes 0: no limit)",
        "in-place": "in-place calls need inplace=\"1\", out-of-place calls outofplace=\"1\"",
        "op": "the reduction is sum, prod, max or min (avg and premulsum fall back)",
    }
    executor = []
    for runtime, life, parser in ((Runtime.RCCL, RCCL_LIFE, RCCL_PARSER),
                                  (Runtime.AZURE, AZURE_LIFE, AZURE_PARSER)):
        select = f"{life} mscclInternalSchedulerSelectAlgo"
        rules = [
            Rule("attributes", runtime, f"{parser} mscclGetAlgoMetaFromXmlFile",
                 "the algo element has " + ", ".join(META_ATTRIBUTES) + ", coll as "
                 "the runtime spells it; else the directory scan fails, and connect.cc "
                 "ignores that"),
            *(Rule(rule, runtime, select, text) for rule, text in shared.items()),
            Rule("processes", runtime, f"{life} mscclCommCompatible",
                 "one process per GPU (no two ranks of one process on one host)"),
            Rule("enabled", runtime, f"{life} mscclEnabled",
                 "RCCL_MSCCL_ENABLE is not 0, and the machine is in RCCL's model table or "
                 "RCCL_MSCCL_FORCE_ENABLE=1 (mscclSchedulerSelectAlgo)"
                 if runtime is Runtime.RCCL else "NCCL_MSCCL_ENABLE is not 0"),
        ]
        if runtime is Runtime.RCCL:
            rules.append(Rule("channels", runtime, f"{life} mscclInternalSchedulerInit",
                              "nchannels is at most NCCL_MAX_NCHANNELS"))
        rules.append(Rule("loads", runtime, f"{parser} mscclGetAlgoFromXmlFile",
                          "the file is one the runtime's parser loads"))
        executor.append((runtime, tuple(rules)))
    ms_select = f"{MS_TUNING} ncclTopoGetMSCCLAlgo"
    ms = (
        Rule("attributes", Runtime.MSCCL, f"{MS_TOPO} mscclGetAlgoFromXMLAndSetAlgo",
             "coll is one microsoft/msccl reads (reduce_scatter, custom)"),
        Rule("ranks", Runtime.MSCCL, f"{MS_TOPO} mscclGetAlgoFromXMLAndSetAlgo",
             "the communicator has ngpus ranks; else the file is ignored at init"),
        Rule("chunks", Runtime.MSCCL, ms_select,
             "each call's count (bytes for allgather and broadcast, elements otherwise; the "
             "whole buffer's) is a multiple of nchunksperloop"),
        Rule("size", Runtime.MSCCL, ms_select,
             "each call's size lies in [minBytes, maxBytes); no maxBytes means 128 MB"),
        Rule("in-place", Runtime.MSCCL, ms_select,
             "the call's in-place-ness equals inplace (alltoall: not checked)"),
        Rule("op", Runtime.MSCCL, ms_select, shared["op"]),
        Rule("enabled", Runtime.MSCCL, f"{MS_TUNING} ncclTopoTuneModel",
             "NCCL_ALGO enables MSCCL (it is off by default) and MSCCL_XML_FILES or "
             "MSCCL_CONFIG names the file (src/init.cc)"),
        Rule("protocol", Runtime.MSCCL, f"{MS_TUNING} ncclTopoTuneModel",
             "NCCL_PROTO allows the file's proto; LL128 is on by default only on V100 or "
             "A100 with NVLink"),
        Rule("channels", Runtime.MSCCL, f"{MS_TOPO} mscclGetAlgoFromXMLAndSetAlgo",
             "nchannels is at most NCCL_MAX_NCHANNELS (32)"),
        Rule("loads", Runtime.MSCCL, f"{MS_TOPO} mscclGetAlgoFromXMLAndSetAlgo",
             "the file is one the runtime's parser loads; else it is ignored with a WARN"),
    )
    return {**dict(executor), Runtime.MSCCL: ms}


RULES = _rules()
"""Per MSCCL runtime, every rule :func:`lint_xml` checks, in the order it reports them."""


class _Header:
    """The ``algo`` element's attributes as the runtime reads them (``strtol`` base 0)."""

    def __init__(self, root: ET.Element, runtime: Runtime, text: str) -> None:
        self.root, self.runtime, self.text = root, runtime, text
        self.raw = dict(root.attrib)
        names = _MS_NAMES if runtime is Runtime.MSCCL else _RCCL_NAMES
        self.coll = self.raw.get("coll", "")
        self.kind = names.get(self.coll)

    def int(self, name: str) -> int | None:
        return env_int(self.raw, name)

    @property
    def ngpus(self) -> int | None:
        return self.int("ngpus")

    @property
    def chunks(self) -> int | None:
        return self.int("nchunksperloop")


def lint_xml(path: str | Path, runtime: Runtime | str = Runtime.RCCL,
             call: Call | None = None) -> Report:
    """Every rule ``runtime`` would find broken running the MSCCL XML file at ``path`` for
    ``call``'s calls; ``InputError`` where the file cannot be read as XML."""
    from ccweave.infile import read_text

    path = Path(path)
    text = read_text(path, "give one MSCCL XML algorithm")
    return lint_xml_text(text, str(path), runtime, call)


def lint_xml_text(text: str, source: str, runtime: Runtime | str = Runtime.RCCL,
                  call: Call | None = None) -> Report:
    """:func:`lint_xml` on a file's text; ``source`` names it."""
    runtime = Runtime.parse(runtime)
    if runtime is Runtime.MSCCLPP:
        raise InputError(f"{source}: an MSCCL XML algorithm; --runtime mscclpp lints MSCCL++ "
                         "execution plans (JSON): choose rccl, msccl or azure")
    call = call or Call()
    root = parse_document(text, source)
    if root.tag != "algo":
        raise InputError(f"{source}: the root element is <{root.tag}>, not an MSCCL <algo>")
    head = _Header(root, runtime, text)
    checks = _MS_CHECKS if runtime is Runtime.MSCCL else _EXECUTOR_CHECKS
    findings = [f for rule in RULES[runtime] for f in checks[rule.id](head, call, source)]
    ranks = head.ngpus or 0
    return Report(source, runtime, head.kind.value if head.kind else head.coll, ranks,
                  tuple(findings))


# ---------------------------------------------------------------- checks shared by rules

Check = Callable[[_Header, Call, str], list[Finding]]


def _ranks(head: _Header, call: Call, source: str) -> list[Finding]:
    n = head.ngpus
    if call.ranks is None or n is None or n == call.ranks:
        return []
    ignored = ("is ignored when NCCL initializes" if head.runtime is Runtime.MSCCL
               else "never matches a call")
    return [Finding("ranks", f"ngpus={n} but the communicator has {call.ranks} ranks: the "
                    f"algorithm {ignored}",
                    f"export a schedule made for {call.ranks} ranks (ccweave synth TOPO "
                    f"with {call.ranks} GPUs)")]


def _op(head: _Header, call: Call, source: str) -> list[Finding]:
    if head.kind not in REDUCING or call.op in ("sum", "prod", "max", "min"):
        return []
    where = ("mscclInternalSchedulerSelectAlgo returns for op >= ncclAvg"
             if head.runtime is not Runtime.MSCCL else "ncclTopoGetMSCCLAlgo runs only sum, "
             "prod, max and min")
    return [Finding("op", f"--op {call.op}: {where}, so every such call falls back (PyTorch "
                    "passes ReduceOp.AVG as ncclAvg: FSDP2's gradient reduce-scatter and "
                    "all-reduce in float32 or bfloat16 use it)",
                    "reduce with sum and divide after (FSDP2: set_force_sum_reduction_for_"
                    "comms(True)), or reduce in a dtype FSDP2 does not average in")]


def _in_place(head: _Header, call: Call, source: str) -> list[Finding]:
    if head.kind is None:
        return []
    findings = []
    if head.runtime is Runtime.MSCCL:
        if head.kind is Kind.ALLTOALL:
            return []  # all_to_all.cc selects without looking at the buffers
        served = {bool(head.int("inplace"))}
    else:
        served = {kind for kind, attr in ((True, "inplace"), (False, "outofplace"))
                  if head.int(attr)}
    for inplace in call.kinds():
        if inplace in served:
            continue
        word = "in-place" if inplace else "out-of-place"
        other = "out of place" if inplace else "in place"
        fix = (f"make the calls {other}, or load beside it an algorithm written for "
               f"{word} calls (its own buffer layout: ccweave verify proves it)")
        if head.runtime is Runtime.MSCCL:
            message = (f"{word} calls: inplace=\"{int(not inplace)}\", and microsoft/msccl "
                       "runs a file only for calls of its own kind")
        else:
            attr = "inplace" if inplace else "outofplace"
            value = head.raw.get(attr)
            said = f"{attr}=\"{value}\"" if value is not None else f"no {attr}"
            message = f"{word} calls: {said}, so they fall back"
        findings.append(Finding("in-place", message, fix))
    return findings


def _size_bytes(kind: Kind, size: int, ranks: int) -> int:
    """The runtime's ``nBytes`` for a call of nccl-tests size ``size``: the whole buffer,
    except gather and scatter (RCCL's sizeMultiplier 1: one rank's part)."""
    return size // ranks if kind in (Kind.GATHER, Kind.SCATTER) else size


def _chunks(head: _Header, call: Call, source: str) -> list[Finding]:
    chunks, n = head.chunks, call.ranks or head.ngpus
    if not call.sizes or head.kind is None or not chunks or chunks < 1 or not n:
        return []
    by_bytes = head.runtime is Runtime.MSCCL and head.kind in (Kind.ALLGATHER,
                                                               Kind.BROADCAST)
    unit = 1 if by_bytes else call.element_bytes
    bad = [size for size in call.sizes
           if (_size_bytes(head.kind, size, n) // unit) % chunks]
    if not bad:
        return []
    what = "bytes" if by_bytes else f"{call.dtype} elements"
    first = _size_bytes(head.kind, bad[0], n) // unit
    step = chunks * unit * (n if head.kind in (Kind.GATHER, Kind.SCATTER) else 1)
    return [Finding("chunks", f"nchunksperloop={chunks} does not divide the count at "
                    f"{sizes_text(bad)} ({format_size(bad[0])} is {first} {what}): those "
                    "calls fall back", f"call with sizes that are multiples of "
                    f"{format_size(step)}, or export with fewer chunks (ccweave synth "
                    "--chunks)")]


def _window(head: _Header) -> tuple[int, int | None, bool] | None:
    """(minBytes, maxBytes or None for no limit, max inclusive) as the runtime reads them."""
    low, high = head.int("minBytes"), head.int("maxBytes")
    if head.runtime is Runtime.MSCCL:
        return (low or 0, MS_DEFAULT_MAX_BYTES if high is None else high, False)
    if low is None or high is None:
        return None  # the attributes rule reports it
    return (low, None if high == 0 else high, True)


def _size(head: _Header, call: Call, source: str) -> list[Finding]:
    n = call.ranks or head.ngpus
    if not call.sizes or head.kind is None or not n:
        return []
    if head.runtime is Runtime.MSCCL and call.env is not None and call.env.get("MSCCL_CONFIG"):
        return [Finding("size", "MSCCL_CONFIG is set: its <load minbytes maxbytes> replace "
                        "the file's window, which lint does not read", "lint the sizes "
                        "against the config's ranges (ccweave export writes both)",
                        note=True)]
    window = _window(head)
    if window is None:
        return []
    low, high, inclusive = window
    bad = [size for size in call.sizes
           if not (_size_bytes(head.kind, size, n) >= low
                   and (high is None or (_size_bytes(head.kind, size, n) <= high
                                         if inclusive else
                                         _size_bytes(head.kind, size, n) < high)))]
    if not bad:
        return []
    if high is None:
        shown = f"[{format_size(low)}, no limit]"
    else:
        shown = (f"[{format_size(low)}, {format_size(high)}]" if inclusive
                 else f"[{format_size(low)}, {format_size(high)})")
    default = (" (no maxBytes: microsoft/msccl's default 128 MB)"
               if head.runtime is Runtime.MSCCL and head.int("maxBytes") is None else "")
    fix = ("export with --max-bytes covering them, or a plan whose ranges do (ccweave "
           "export PLAN -o DIR)")
    return [Finding("size", f"{sizes_text(bad)} outside minBytes..maxBytes {shown}"
                    f"{default}: those calls fall back", fix)]


def _env_enabled(head: _Header, call: Call, source: str) -> list[Finding]:
    env = call.env
    if env is None:
        return []
    if head.runtime is Runtime.RCCL:
        findings = []
        if env_int(env, "RCCL_MSCCL_ENABLE") == 0:
            findings.append(Finding("enabled", "RCCL_MSCCL_ENABLE=0: RCCL never runs MSCCL "
                                    "algorithms", "unset RCCL_MSCCL_ENABLE (default 1)"))
        if env_int(env, "RCCL_MSCCL_FORCE_ENABLE") != 1:
            findings.append(Finding(
                "enabled", "RCCL_MSCCL_FORCE_ENABLE is not 1: RCCL selects MSCCL algorithms "
                "only on machines its model table marks mscclEnabled (src/graph/"
                "rome_models.cc: rome_model_56, 16 GPUs on 4 CPUs; rome_model_79, 8 GPUs "
                "each linked to all 7 others, as MI300X), elsewhere every call falls back",
                "export RCCL_MSCCL_FORCE_ENABLE=1 in the job's environment", note=True))
        return findings
    if env_int(env, "NCCL_MSCCL_ENABLE") == 0:
        return [Finding("enabled", "NCCL_MSCCL_ENABLE=0: the executor never runs MSCCL "
                        "algorithms", "unset NCCL_MSCCL_ENABLE (default 1)")]
    return []


def _processes(head: _Header, call: Call, source: str) -> list[Finding]:
    if call.ranks_per_process == 1:
        return []
    if head.runtime is Runtime.RCCL:
        if call.env is not None and env_int(call.env, "RCCL_MSCCL_ENABLE_SINGLE_PROCESS") == 1:
            return [Finding("processes", f"{call.ranks_per_process} ranks per process: RCCL "
                            "releases up to rocm-6.2.2 run MSCCL only with one process per "
                            "GPU (later ones with RCCL_MSCCL_ENABLE_SINGLE_PROCESS=1, as set "
                            "here)", "on rocm-6.2.2 or older, launch one process per GPU",
                            note=True)]
        return [Finding("processes", f"{call.ranks_per_process} ranks per process: "
                        "mscclCommCompatible turns MSCCL off for the communicator (RCCL up "
                        "to rocm-6.2.2 always, later releases with "
                        "RCCL_MSCCL_ENABLE_SINGLE_PROCESS=0)",
                        "launch one process per GPU (torchrun --nproc_per_node=GPUS; "
                        "nccl-tests with mpirun -np GPUS ... -g 1)")]
    return [Finding("processes", f"{call.ranks_per_process} ranks per process: "
                    "mscclCommCompatible turns MSCCL off for the communicator",
                    "launch one process per GPU (torchrun --nproc_per_node=GPUS; nccl-tests "
                    "with mpirun -np GPUS ... -g 1)")]


def _channels(head: _Header, call: Call, source: str) -> list[Finding]:
    have = head.int("nchannels")
    if have is None:
        return []
    cap = env_int(call.env, "NCCL_MAX_NCHANNELS") if call.env is not None else None
    if head.runtime is Runtime.MSCCL:
        cap = MS_MAX_CHANNELS if cap is None else min(cap, MS_MAX_CHANNELS)
    if cap is None or have <= cap:
        return []
    return [Finding("channels", f"nchannels={have} above the {cap} channels NCCL may use "
                    "(NCCL_MAX_NCHANNELS): the runtime drops the algorithm",
                    f"raise NCCL_MAX_NCHANNELS to {have}, or export with fewer channels")]


def _attributes(head: _Header, call: Call, source: str) -> list[Finding]:
    if head.runtime is Runtime.MSCCL:
        if head.kind is None and head.coll != msccl_spec.CUSTOM:
            known = ", ".join([*_MS_NAMES, msccl_spec.CUSTOM])
            return [Finding("attributes", f"coll={head.coll!r} is not a collective "
                            f"microsoft/msccl reads ({known}): the file is ignored at init",
                            "re-export with ccweave export --runtime msccl")]
        return []
    findings = []
    missing = [name for name in META_ATTRIBUTES if name not in head.raw]
    if missing:
        findings.append(Finding(
            "attributes", f"the algo element has no {', '.join(missing)}: the scan of "
            "MSCCL_ALGO_DIR fails at this file ('Attribute ... not found') and connect.cc "
            "ignores the failure, so MSCCL runs nothing", "add them (minBytes=\"0\" "
            "maxBytes=\"0\" for every size, outofplace=\"0\" or \"1\"), or re-export with "
            "ccweave export --runtime azure"))
    if "coll" in head.raw and head.kind is None:
        findings.append(Finding(
            "attributes", f"coll={head.coll!r} is not a collective this runtime reads ("
            f"{', '.join(_RCCL_NAMES)}): the scan of MSCCL_ALGO_DIR fails at this file",
            "re-export with ccweave export --runtime azure (reduce-scatter is "
            "'reducescatter')"))
    return findings


def _loads(head: _Header, call: Call, source: str) -> list[Finding]:
    """What the runtime's reader and parser refuse (``ccweave.export.xml_lexer``,
    ``xml_check``), less what the attributes rule already says."""
    spelling = msccl_spec.Runtime.MSCCL if head.runtime is Runtime.MSCCL \
        else msccl_spec.Runtime.AZURE
    problems = [p for p in (*lex_check(head.text), *check_xml(head.root, spelling))
                if not (p.where == "algo" and p.attribute in (*META_ATTRIBUTES, "collective"))]
    if not problems:
        return []
    if head.runtime is Runtime.MSCCL:
        effect = "microsoft/msccl ignores the file with a WARN"
    else:
        effect = "the runtime fails when the communicator loads it"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return [Finding("loads", f"{problems[0]}{more}: {effect}",
                    f"ccweave verify {source} names each; re-export with ccweave export")]


def _ms_enabled(head: _Header, call: Call, source: str) -> list[Finding]:
    env = call.env
    if env is None:
        return []
    findings = []
    if head.kind is not Kind.ALLTOALL:  # all_to_all.cc selects without the tuner
        algo = env.get("NCCL_ALGO")
        if not _listed(algo, "msccl"):
            value = f"NCCL_ALGO={algo}" if algo else "NCCL_ALGO is unset"
            findings.append(Finding("enabled", f"{value}: MSCCL is off unless NCCL_ALGO "
                                    "enables it, so every call runs NCCL's algorithms",
                                    "export NCCL_ALGO=MSCCL,Ring,Tree"))
    files, config = env.get("MSCCL_XML_FILES"), env.get("MSCCL_CONFIG")
    if not files and not config:
        findings.append(Finding("enabled", "neither MSCCL_XML_FILES nor MSCCL_CONFIG is set: "
                                "microsoft/msccl loads no algorithm",
                                f"export MSCCL_XML_FILES={source}"))
    elif files and not config and not _names_file(files, source):
        findings.append(Finding("enabled", f"MSCCL_XML_FILES={files} does not name this file",
                                f"add {source} to MSCCL_XML_FILES (':'-separated)"))
    return findings


def _ms_protocol(head: _Header, call: Call, source: str) -> list[Finding]:
    proto = head.raw.get("proto", "")
    if call.env is None or proto not in msccl_spec.PROTOCOLS:
        return []
    allowed = call.env.get("NCCL_PROTO")
    if allowed and not _listed(allowed, proto):
        return [Finding("protocol", f"NCCL_PROTO={allowed} leaves out the file's proto "
                        f"{proto}: the algorithm is never picked",
                        f"add {proto} to NCCL_PROTO, or export with --proto Simple")]
    if not allowed and proto == "LL128":
        return [Finding("protocol", "proto LL128: NCCL enables it by default only on V100 or "
                        "A100 with NVLink; elsewhere the algorithm is never picked",
                        "export NCCL_PROTO=LL,LL128,Simple, or export with --proto Simple",
                        note=True)]
    return []


def _listed(value: str | None, name: str) -> bool:
    """Whether NCCL's ``parseList`` enables ``name`` in ``value`` (``^`` excludes)."""
    if not value:
        return False
    excluding = value.startswith("^")
    named = {token.strip().lower() for token in value.lstrip("^").split(",")}
    return (name.lower() not in named) if excluding else (name.lower() in named)


def _names_file(files: str, source: str) -> bool:
    target = os.path.realpath(source)
    return any(os.path.realpath(entry) == target for entry in files.split(":") if entry)


_EXECUTOR_CHECKS: Mapping[str, Check] = {
    "attributes": _attributes, "ranks": _ranks, "chunks": _chunks, "size": _size,
    "in-place": _in_place, "op": _op, "processes": _processes, "enabled": _env_enabled,
    "channels": _channels, "loads": _loads}
_MS_CHECKS: Mapping[str, Check] = {
    "attributes": _attributes, "ranks": _ranks, "chunks": _chunks, "size": _size,
    "in-place": _in_place, "op": _op, "enabled": _ms_enabled, "protocol": _ms_protocol,
    "channels": _channels, "loads": _loads}
