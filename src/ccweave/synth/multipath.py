"""The ``multipath`` strategy: one message striped over every useful path, as
:func:`ccweave.multipath.plan_p2p` plans it (``ccweave synth TOPO sendrecv --strategy
multipath``)."""

from __future__ import annotations

from ccweave.collectives import Kind
from ccweave.errors import InputError
from ccweave.multipath.p2p import DEFAULT_KINDS, DEFAULT_SIZE, plan_p2p
from ccweave.multipath.paths import MAX_PATHS, MAX_RELAYS
from ccweave.multipath.shares import MAX_PIECES
from ccweave.schedule import Schedule
from ccweave.synth.layout import reject_options, require_kind
from ccweave.synth.registry import register
from ccweave.topology.model import Topology
from ccweave.units import parse_size


@register("multipath", {Kind.SENDRECV},
          "one message striped over the direct route, host/fabric routes and peer relays, "
          "pipelined, shares tuned in simulation at option size", classic=False, sized=True)
def build_multipath(topology: Topology, kind: Kind, *, root: int = 0,
                    chunks: int | None = None, **options: object) -> Schedule:
    """``sendrecv`` from ``root`` to option ``peer`` (default ``root + 1``) planned by
    :func:`plan_p2p` for option ``size`` bytes (default 64 MiB); options ``kinds``
    (comma-separated), ``max_paths``, ``max_relays``, ``max_pieces`` as there."""
    require_kind(kind, {Kind.SENDRECV}, "multipath")
    known = ("peer", "size", "kinds", "max_paths", "max_relays", "max_pieces")
    reject_options(options, "multipath", known)
    kinds = options.get("kinds", DEFAULT_KINDS)
    if isinstance(kinds, str):
        kinds = tuple(k.strip() for k in kinds.split(","))
    size = options.get("size", DEFAULT_SIZE)
    plan = plan_p2p(topology, root, _whole(options.get("peer", (root + 1) %
                                                       topology.num_ranks), "peer"),
                    parse_size(size) if isinstance(size, str) else _whole(size, "size"),
                    kinds=tuple(kinds),  # type: ignore[arg-type]
                    max_paths=_whole(options.get("max_paths", MAX_PATHS), "max_paths"),
                    max_relays=_whole(options.get("max_relays", MAX_RELAYS), "max_relays"),
                    max_pieces=_whole(options.get("max_pieces", MAX_PIECES), "max_pieces"),
                    chunks_per_rank=chunks)
    return plan.to_schedule()


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise InputError(f"strategy 'multipath': option {name} must be a whole number, "
                         f"got {value!r}")
    return int(value)
