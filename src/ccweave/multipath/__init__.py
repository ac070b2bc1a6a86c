"""Interconnect-aware multipath transfers (the UCX/MPI line: IEEE Micro 2022, ExaMPI'25).

One message striped over every useful path at once, pipelined in pieces:
:func:`plan_p2p` for one point-to-point message (a ``sendrecv`` schedule),
:func:`ccweave.multipath.stripe.stripe` for every transfer of any schedule, with the
schedule's own contention taken into account. docs/multipath.md explains the model.
"""

from ccweave.multipath.p2p import P2PPlan, PathShare, plan_p2p
from ccweave.multipath.paths import Hop, Path, find_paths

__all__ = ["Hop", "P2PPlan", "Path", "PathShare", "find_paths", "plan_p2p"]
