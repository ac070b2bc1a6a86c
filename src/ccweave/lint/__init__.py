"""Why a runtime ignores an algorithm: the conditions under which RCCL, the MSCCL runtimes
and MSCCL++'s NCCL shim run a loaded algorithm, checked on a file and the job's calls.

``lint(path, runtime, call)`` reads an MSCCL XML algorithm or an MSCCL++ execution plan
and returns a :class:`Report` whose findings each name the rule, the value that breaks it
and the fix. Each rule cites the runtime's file and function (:data:`RULES`;
docs/lint.md). A finding means the runtime silently runs its own algorithm instead, or,
where it says so, fails or computes something else.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ccweave.errors import InputError
from ccweave.lint.model import DTYPE_BYTES, OPS, Call, Finding, Report, Rule, Runtime
from ccweave.lint.msccl import RULES as XML_RULES
from ccweave.lint.msccl import lint_xml, lint_xml_text
from ccweave.lint.mscclpp import RULES as PLAN_RULES
from ccweave.lint.mscclpp import lint_plan, lint_plan_doc

__all__ = ["DTYPE_BYTES", "OPS", "RULES", "Call", "Finding", "Report", "Rule", "Runtime",
           "default_runtime", "lint", "lint_plan", "lint_plan_doc", "lint_written", "lint_xml",
           "lint_xml_text"]

RULES: dict[Runtime, tuple[Rule, ...]] = {**XML_RULES, Runtime.MSCCLPP: PLAN_RULES}
"""Every rule per runtime, in the order findings are reported."""


def default_runtime(path: str | Path) -> Runtime:
    """RCCL for an MSCCL XML file (the MSCCL that ships inside ROCm), MSCCL++ for JSON."""
    return Runtime.RCCL if Path(path).suffix.lower() == ".xml" else Runtime.MSCCLPP


def lint(path: str | Path, runtime: Runtime | str | None = None,
         call: Call | None = None) -> Report:
    """Lint the algorithm file at ``path`` for ``runtime`` (default: by the file's kind)
    and the job's ``call``.

    Parameters
    ----------
    path: an MSCCL XML algorithm (``.xml``) or an MSCCL++ execution plan (JSON).
    runtime: ``rccl``, ``msccl``, ``azure`` (XML) or ``mscclpp`` (plans).
    call: the job's calls: ranks, sizes, dtype, op, in place or not, ranks per process and
        its environment (``None``: only what the file alone decides).

    Returns
    -------
    Report: the findings, in the order of :data:`RULES`.
    """
    from ccweave.export.mscclpp_model import parse as parse_plan
    from ccweave.infile import read_text
    from ccweave.jsonfile import parse as parse_json

    fix = "give an MSCCL XML algorithm (.xml) or an MSCCL++ execution plan (JSON)"
    text = read_text(path, fix)  # once: a pipe or /dev/stdin has no suffix to go by
    xml = Path(path).suffix.lower() == ".xml" or text.lstrip().startswith("<")
    if runtime is not None:
        runtime = Runtime.parse(runtime)
    else:
        runtime = Runtime.RCCL if xml else Runtime.MSCCLPP
    if runtime is Runtime.MSCCLPP:
        if xml:
            raise InputError(f"{path}: an MSCCL XML algorithm; --runtime mscclpp lints "
                             "MSCCL++ execution plans (JSON): choose rccl, msccl or azure")
        data = parse_json(text, str(path), "give an MSCCL++ execution plan (JSON)")
        return lint_plan_doc(parse_plan(data, str(path)), str(path), call)
    if not xml:
        raise InputError(f"{path}: --runtime {runtime.value} lints MSCCL XML algorithms "
                         "(.xml); an MSCCL++ plan (JSON) takes --runtime mscclpp")
    return lint_xml_text(text, str(path), runtime, call)


def lint_written(path: str | Path, runtime: Runtime | str) -> Report:
    """What a file ``ccweave export`` wrote decides alone, for the calls it was written for
    (its own in-place kind, any size, no environment): the warnings ``export`` prints."""
    runtime = Runtime.parse(runtime)
    if runtime is Runtime.MSCCLPP:
        from ccweave.jsonfile import read_json

        data = read_json(path, "an MSCCL++ execution plan")
        inplace = bool(data.get("inplace")) if isinstance(data, dict) else None
    else:
        inplace = ET.parse(path).getroot().get("inplace") == "1"
    return lint(path, runtime, Call(inplace=inplace))
