"""ccweave: collective-communication algorithms shaped to the machine they run on."""

from ccweave.collectives import Buffer, Collective, Kind
from ccweave.errors import (
    CCWeaveError,
    InputError,
    LimitError,
    NotApplicableError,
    SolverError,
    TopologyError,
    VerificationError,
)
from ccweave.schedule import Op, Schedule, ScheduleBuilder, Transfer
from ccweave.topology.model import Link, NodeKind, Topology

__version__ = "0.1.0"

__all__ = [
    "Buffer", "CCWeaveError", "Collective", "InputError", "Kind", "LimitError", "Link", "NodeKind",
    "NotApplicableError", "Op", "Schedule", "ScheduleBuilder", "SolverError", "Topology",
    "TopologyError", "Transfer", "VerificationError", "__version__",
]
