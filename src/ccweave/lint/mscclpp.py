"""The conditions under which MSCCL++'s NCCL shim runs an execution plan, and the findings
where a plan, the job's calls or its environment break one.

Read from microsoft/mscclpp at 1f5f065d: ``src/ext/nccl/algorithm_selector.cc``
``matchExecutionPlan`` (a plan serves a call when world size, ranks per node, collective,
buffer mode and the message-size window match), ``src/ext/nccl/nccl.cc`` (the requests
the shim makes and ``MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION``), ``src/core/algorithm.cc``
``DslAlgorithm::execute`` (the data types it runs; the reduction it is given is not used)
and ``src/core/executor/execution_plan.cc`` ``checkMessageSize`` (sizes the executor
refuses).
"""

from __future__ import annotations

import math
from pathlib import Path

from ccweave.export import mscclpp_spec as spec
from ccweave.export.mscclpp_model import PlanDoc, parse
from ccweave.jsonfile import read_json
from ccweave.lint.model import Call, Finding, Report, Rule, Runtime, sizes_text
from ccweave.units import format_size

SELECTOR = "microsoft/mscclpp src/ext/nccl/algorithm_selector.cc matchExecutionPlan"
SHIM = "microsoft/mscclpp src/ext/nccl/nccl.cc"
EXECUTE = "microsoft/mscclpp src/core/algorithm.cc DslAlgorithm::execute"
CHECK_SIZE = "microsoft/mscclpp src/core/executor/execution_plan.cc checkMessageSize"

REQUESTED = ("allreduce", "allgather", "reducescatter", "broadcast")
"""The collectives the shim asks plans for (``nccl.cc``: ``.collective = ...``)."""
REDUCING = ("allreduce", "reducescatter")
DTYPES = ("float16", "float32", "bfloat16", "int32", "uint32", "float8e4m3", "float8e5m2")
"""The types ``DslAlgorithm::execute`` runs; others end in 'Unsupported data type'."""

RULES: tuple[Rule, ...] = (
    Rule("collective", Runtime.MSCCLPP, f"{SELECTOR} (collectiveMatch); {SHIM}",
         "the plan's collective is one the shim asks for: " + ", ".join(REQUESTED)),
    Rule("ranks", Runtime.MSCCLPP, f"{SELECTOR} (worldSizeMatch)",
         "the communicator has as many ranks as the plan has gpus"),
    Rule("size", Runtime.MSCCLPP, f"{SELECTOR} (minSizeMatch, maxSizeMatch)",
         "each call's size (allgather: the whole output) lies in min_message_size.."
         "max_message_size, both inclusive"),
    Rule("in-place", Runtime.MSCCLPP, f"{SELECTOR} (bufferModeMatch)",
         "the call's buffers are in place exactly when the plan's inplace is true"),
    Rule("chunks", Runtime.MSCCLPP, CHECK_SIZE,
         "each buffer's size is a multiple of buffer_alignment times its chunks; else the "
         "executor throws"),
    Rule("dtype", Runtime.MSCCLPP, EXECUTE,
         "the data type is one the executor runs: " + ", ".join(DTYPES)),
    Rule("op", Runtime.MSCCLPP, EXECUTE,
         "the reduction is sum: the executor is not told the call's op and always sums"),
    Rule("enabled", Runtime.MSCCLPP, f"{SHIM} mscclppNcclInFallbackList",
         "MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION does not list the collective (or all)"),
)


def lint_plan(path: str | Path, call: Call | None = None) -> Report:
    """Every rule MSCCL++'s NCCL shim would find broken running the plan at ``path`` for
    ``call``'s calls; ``InputError`` where its loader could not read the plan."""
    data = read_json(path, "give an MSCCL++ execution plan (JSON)")
    return lint_plan_doc(parse(data, str(path)), str(path), call)


def lint_plan_doc(doc: PlanDoc, source: str, call: Call | None = None) -> Report:
    """:func:`lint_plan` on a parsed plan; ``source`` names it."""
    call = call or Call()
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(_CHECKS[rule.id](doc, call, source))
    return Report(source, Runtime.MSCCLPP, doc.collective, len(doc.gpus), tuple(findings))


def _collective(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    if doc.collective in REQUESTED:
        return []
    return [Finding("collective", f"collective {doc.collective!r}: the shim asks plans only "
                    f"for {', '.join(REQUESTED)} (its ncclAllToAll and ncclReduce run no "
                    "plan), so no call ever runs it",
                    "name the collective as the shim does (reduce-scatter is "
                    "'reducescatter'), or run it through MSCCL++'s own communicator")]


def _ranks(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    if call.ranks is None or call.ranks == len(doc.gpus):
        return []
    return [Finding("ranks", f"the plan has {len(doc.gpus)} gpus but the communicator has "
                    f"{call.ranks} ranks: it never matches a call",
                    f"export a plan for {call.ranks} ranks (ccweave export --format mscclpp "
                    "with a schedule of that size)")]


def _size(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    low, high = doc.min_message_size, doc.max_message_size
    bad = [s for s in call.sizes if not low <= s <= high]  # nccl-tests' size: the whole
    # buffer, as the selector compares it (allgather messageSize x worldSize)
    if not bad:
        return []
    top = "no limit" if high >= spec.OPEN_MAX_MESSAGE else format_size(high)
    return [Finding("size", f"{sizes_text(bad)} outside min_message_size..max_message_size "
                    f"[{format_size(low)}, {top}]: those calls run NCCL (or fail without "
                    "MSCCLPP_NCCL_LIB_PATH)", "export a plan whose size ranges cover them "
                    "(ccweave export PLAN --format mscclpp -o DIR)")]


def _in_place(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    findings = []
    for inplace in call.kinds():
        if inplace == doc.inplace:
            continue
        word = "in-place" if inplace else "out-of-place"
        findings.append(Finding("in-place", f"{word} calls: the plan says inplace "
                                f"{str(doc.inplace).lower()}, so they run NCCL",
                                f"export with --{'in-place' if inplace else 'out-of-place'} "
                                "for them, or make the calls "
                                + ("out of place" if inplace else "in place")))
    return findings


def _buffers(doc: PlanDoc, size: int, ranks: int) -> tuple[int, int]:
    """(input, output) bytes of one rank for a call of nccl-tests size ``size``."""
    if doc.collective == "allgather":
        return size // ranks, size
    if doc.collective == "reducescatter":
        return size, size // ranks
    return size, size


def _chunks(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    align, n = doc.buffer_alignment, len(doc.gpus)
    if align < 1 or not call.sizes:
        return []
    per_rank = (doc.collective == "allgather", doc.collective == "reducescatter")
    step = 1
    for gpu in doc.gpus:
        for chunks, split in zip((gpu.input_chunks, gpu.output_chunks), per_rank):
            if chunks:
                step = math.lcm(step, align * chunks * (n if split else 1))
    bad = []
    for size in call.sizes:
        for gpu in doc.gpus:
            sizes = zip(("input", "output"), _buffers(doc, size, n),
                        (gpu.input_chunks, gpu.output_chunks))
            uneven = [(what, nbytes, chunks) for what, nbytes, chunks in sizes
                      if chunks and (nbytes % align or (nbytes // align) % chunks)]
            if uneven:
                bad.append((size, gpu.id, *uneven[0]))
                break
    if not bad:
        return []
    _, gpu, what, nbytes, chunks = bad[0]
    return [Finding("chunks", f"at {sizes_text([b[0] for b in bad])} the executor throws "
                    f"'Input or output size is not aligned' (gpu {gpu}'s {what} of {nbytes} B "
                    f"is not a multiple of buffer_alignment {align} x {chunks} chunks)",
                    f"call with sizes that are multiples of {format_size(step)}, or export "
                    "with fewer chunks")]


def _dtype(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    if call.dtype in DTYPES:
        return []
    return [Finding("dtype", f"--dtype {call.dtype}: the executor runs "
                    f"{', '.join(DTYPES)}; this call ends in 'Unsupported data type'",
                    "call in one of those types")]


def _op(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    if doc.collective not in REDUCING or call.op == "sum":
        return []
    return [Finding("op", f"--op {call.op}: the executor is not told the call's op and "
                    "sums, so the result is the sum, not the " + call.op,
                    "reduce with sum (divide after for avg), or leave these calls to NCCL "
                    f"(MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION={doc.collective})")]


def _enabled(doc: PlanDoc, call: Call, source: str) -> list[Finding]:
    if call.env is None:
        return []
    listed = call.env.get("MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION", "")
    names = {name.strip() for name in listed.split(",")}
    if doc.collective not in names and "all" not in names:
        return []
    if not call.env.get("MSCCLPP_NCCL_LIB_PATH"):
        return [Finding("enabled", f"MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION={listed} names "
                        f"{doc.collective}, which takes effect only with "
                        "MSCCLPP_NCCL_LIB_PATH set", "remove it from the list",
                        note=True)]
    return [Finding("enabled", f"MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION={listed}: every "
                    f"{doc.collective} call runs NCCL", f"remove {doc.collective} (and all) "
                    "from the list")]


_CHECKS = {"collective": _collective, "ranks": _ranks, "size": _size, "in-place": _in_place,
           "chunks": _chunks, "dtype": _dtype, "op": _op, "enabled": _enabled}

