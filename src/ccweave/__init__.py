"""ccweave: collective-communication algorithms shaped to the machine they run on.

The names below load on first use (PEP 562): ``import ccweave.cli`` does not pay for numpy
and scipy before the command can handle a Ctrl-C."""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Buffer": "ccweave.collectives", "Collective": "ccweave.collectives",
    "Kind": "ccweave.collectives",
    "CCWeaveError": "ccweave.errors", "InputError": "ccweave.errors",
    "LimitError": "ccweave.errors", "NotApplicableError": "ccweave.errors",
    "SolverError": "ccweave.errors", "TopologyError": "ccweave.errors",
    "VerificationError": "ccweave.errors",
    "Op": "ccweave.schedule", "Schedule": "ccweave.schedule",
    "ScheduleBuilder": "ccweave.schedule", "Transfer": "ccweave.schedule",
    "Link": "ccweave.topology.model", "NodeKind": "ccweave.topology.model",
    "Topology": "ccweave.topology.model",
}

__all__ = [
    "Buffer", "CCWeaveError", "Collective", "InputError", "Kind", "LimitError", "Link", "NodeKind",
    "NotApplicableError", "Op", "Schedule", "ScheduleBuilder", "SolverError", "Topology",
    "TopologyError", "Transfer", "VerificationError", "__version__",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ccweave' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
