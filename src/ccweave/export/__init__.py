"""Schedules to and from the formats runtimes load: MSCCL XML (:mod:`.msccl_xml`).

``to_xml(schedule)`` / ``export_plan(plan, directory)`` write MSCCL algorithms that pass
``lex_check`` (the runtimes' XML reader) and ``check_xml`` (their parsers' rules and
limits); ``read(path)`` imports one back as a Schedule for ``verify`` and ``simulate``.
"""

from ccweave.export.msccl_spec import Runtime
from ccweave.export.msccl_xml import (
    check_xml,
    export_plan,
    from_xml,
    lex_check,
    read,
    to_xml,
    write,
)
from ccweave.export.problems import Severity, XmlProblem

__all__ = ["Runtime", "Severity", "XmlProblem", "check_xml", "export_plan", "from_xml",
           "lex_check", "read", "to_xml", "write"]
