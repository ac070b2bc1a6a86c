"""TACCL's channel policies for MSCCL XML (its ``ncclize --channel-policy``), as a pass
over a Schedule: which channel each remote transfer takes, hence which threadblocks run
it side by side.

- ``as-scheduled``: the channels the schedule states (ccweave's default).
- ``one``: every transfer on channel 0 (TACCL's ``One``).
- ``match-topology`` (TACCL's default, ``MatchTopology``): the transfers of each
  connection, in order, take its channels in turn, as many as links join the two ranks
  (two NVLinks: two channels; through a switch or the network: one), times
  ``scale_remote`` on connections between nodes (TACCL's ``--scale-remote``).
- ``max-concurrency`` (TACCL's ``MaxConcurrency``): transfers of one connection that run
  at the same step take distinct channels, as few as that needs. A transfer's step is
  its depth in the schedule's dependencies, as ncclize's step is the algorithm's.

Local copies and reductions keep their channels. Dependencies are untouched, so the
schedule proves as before; what changes is what MSCCL fuses and serialises.
"""

from __future__ import annotations

import enum
from dataclasses import replace

from ccweave.errors import InputError
from ccweave.export.msccl_spec import MAX_CHANNELS
from ccweave.schedule import Schedule, topological_order
from ccweave.topology.model import Topology


class ChannelPolicy(str, enum.Enum):
    """How remote transfers are spread over channels (see the module docstring)."""

    AS_SCHEDULED = "as-scheduled"
    ONE = "one"
    MATCH_TOPOLOGY = "match-topology"
    MAX_CONCURRENCY = "max-concurrency"

    @classmethod
    def parse(cls, value: object) -> ChannelPolicy:
        try:
            return cls(value)
        except ValueError:
            raise InputError(f"--channel-policy {value!r}: choose one of "
                             f"{', '.join(p.value for p in cls)}") from None


def apply(schedule: Schedule, policy: ChannelPolicy | str,
          topology: Topology | None = None, scale_remote: int = 1) -> Schedule:
    """``schedule`` with its remote transfers' channels set by ``policy``.

    ``topology`` (``match-topology``): the machine, for how many links join each pair
    and which pairs are in different nodes. Raises ``InputError`` when a policy lacks
    what it needs or would use more channels than MSCCL has.
    """
    policy = ChannelPolicy.parse(policy)
    if isinstance(scale_remote, bool) or not isinstance(scale_remote, int) \
            or scale_remote < 1:
        raise InputError(f"--scale-remote must be a positive integer, got {scale_remote!r}")
    if scale_remote > 1 and policy is not ChannelPolicy.MATCH_TOPOLOGY:
        raise InputError("--scale-remote goes with --channel-policy match-topology (TACCL "
                         "scales the channels of inter-node links there only)")
    if policy is ChannelPolicy.AS_SCHEDULED:
        return schedule
    if policy is ChannelPolicy.ONE:
        channels = {i: 0 for i, t in enumerate(schedule.transfers) if not t.is_local}
    elif policy is ChannelPolicy.MATCH_TOPOLOGY:
        if topology is None:
            raise InputError("--channel-policy match-topology needs the machine (how many "
                             "links join each pair): give --topology, or a schedule that "
                             "names a zoo machine")
        channels = _match_topology(schedule, topology, scale_remote)
    else:
        channels = _max_concurrency(schedule)
    most = max(channels.values(), default=0) + 1
    if most > MAX_CHANNELS:
        raise InputError(f"--channel-policy {policy.value} needs {most} channels; MSCCL has "
                         f"{MAX_CHANNELS}: use a smaller --scale-remote or another policy")
    transfers = tuple(replace(t, channel=channels[i]) if i in channels else t
                      for i, t in enumerate(schedule.transfers))
    return replace(schedule, transfers=transfers).with_name(
        schedule.name, channel_policy=policy.value,
        **({"scale_remote": scale_remote} if scale_remote > 1 else {}))


def lanes(topology: Topology, src: int, dst: int) -> int:
    """How many links join ``src`` to ``dst``: a direct link's bandwidth over the
    narrowest direct link between two ranks of the machine (parallel NVLinks are one
    link of their summed bandwidth), else 1 (a switch, a bridge, the network)."""
    direct = [lk for lk in topology.links if topology.is_rank(lk.src)
              and topology.is_rank(lk.dst)]
    if not direct:
        return 1
    narrowest = min(lk.bandwidth for lk in direct)
    for lk in direct:
        if lk.src == src and lk.dst == dst:
            return max(1, round(lk.bandwidth / narrowest))
    return 1


def _match_topology(schedule: Schedule, topology: Topology,
                    scale_remote: int) -> dict[int, int]:
    if topology.num_ranks != schedule.num_ranks:
        raise InputError(f"the schedule is for {schedule.num_ranks} ranks, the machine "
                         f"{topology.name!r} has {topology.num_ranks}; give its --topology")
    node = {}
    for number, members in enumerate(topology.groups.get("node", ())):
        for rank in members:
            node[rank] = number
    turn: dict[tuple[int, int], int] = {}
    width: dict[tuple[int, int], int] = {}
    channels = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        if t.is_local:
            continue
        pair = (t.src, t.dst)
        if pair not in width:
            remote = node.get(t.src, 0) != node.get(t.dst, 0)
            width[pair] = lanes(topology, t.src, t.dst) * (scale_remote if remote else 1)
        channels[index] = turn.get(pair, 0) % width[pair]
        turn[pair] = turn.get(pair, 0) + 1
    return channels


def _max_concurrency(schedule: Schedule) -> dict[int, int]:
    step = [0] * len(schedule.transfers)
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        step[index] = max((step[d] + (not schedule.transfers[d].is_local) for d in t.deps),
                          default=0)
    taken: dict[tuple[int, int, int], int] = {}
    channels = {}
    for index in topological_order(schedule.transfers):
        t = schedule.transfers[index]
        if t.is_local:
            continue
        key = (t.src, t.dst, step[index])
        channels[index] = taken.get(key, 0)
        taken[key] = channels[index] + 1
    return channels
