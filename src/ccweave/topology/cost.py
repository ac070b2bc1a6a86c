"""What a measured machine adds to its links' alpha-beta figures: the costs that belong to
the ranks and hosts rather than to any link. ``ccweave profile`` fits them on the
running machine; a topology without them (the zoo) has none, and the simulator is the
plain alpha-beta flow model.

- ``message_overhead``: seconds a rank spends issuing each transfer, one after another
  (LogP's *o*): the runtime's, the transport's and the scheduler's per-message cost. A
  schedule of many small transfers pays it per transfer, serialised on each rank.
- ``message_latency``: seconds added to every remote transfer's latency, overlapping
  with other transfers (a message's trip through the runtime, the kernel and a
  scheduler that wakes its receiver late), beside the links' ``alpha``.
- ``host_bandwidth``: bytes/second of message data the CPUs of one host move through
  their network stack (sending and receiving one message counts once), shared max-min by
  every transfer of the host's ranks. CPU transports (gloo and MPI over TCP) spend CPU
  per byte; when ranks outnumber cores this, not the links, is the limit.
- ``staging_latency``: seconds each copy into or out of host memory costs on a staged
  route (a pinned route through a CPU node: the multipath host path) beyond its links'
  ``alpha``: launching the copy and ordering the next stage after it.
- ``link_efficiency``: the share of each link's bandwidth the runtime's messages get
  (framing, protocol acknowledgements, a CPU that serves the network stack late).
- ``connection_fifo``: messages between two ranks on one channel travel one after
  another, in the order they became ready (one connection per peer and channel, as
  ccweave's socket transport, NCCL channels and MSCCL threadblocks have), instead of
  sharing the links side by side.
- ``host_cores``: CPUs of one host that issue messages. A rank issues its messages one
  after another (``message_overhead`` each), and a host's ranks together issue at most
  this many at once: 8 ranks on 2 cores that all send pay about 4 overheads a message.
  ``None``: every rank has a CPU of its own.

Which ranks share a host is the topology's ``host`` group (every rank alone when the
topology has no such group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccweave.errors import TopologyError
from ccweave.topology.plausible import check_bandwidth, check_latency
from ccweave.units import GB_PER_S, US

HOST_GROUP = "host"


@dataclass(frozen=True)
class CostModel:
    """Per-rank and per-host costs beside the links (all zero / ``None``: none)."""

    message_overhead: float = 0.0
    message_latency: float = 0.0
    host_bandwidth: float | None = None
    connection_fifo: bool = False
    link_efficiency: float = 1.0
    staging_latency: float = 0.0
    source: str = ""
    """How the figures were found (for people)."""
    host_cores: int | None = None

    def __post_init__(self) -> None:
        for name in ("message_overhead", "message_latency", "staging_latency"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise TopologyError(f"cost model: {name.replace('_', ' ')} must be >= 0 "
                                    f"seconds, got {value!r}")
        if self.host_bandwidth is not None and not (math.isfinite(self.host_bandwidth)
                                                    and self.host_bandwidth > 0):
            raise TopologyError(f"cost model: host bandwidth must be positive, got "
                                f"{self.host_bandwidth!r}")
        if self.host_cores is not None and (isinstance(self.host_cores, bool)
                                            or not isinstance(self.host_cores, int)
                                            or self.host_cores < 1):
            raise TopologyError(f"cost model: host cores must be a whole number >= 1, got "
                                f"{self.host_cores!r}")
        if not 0 < self.link_efficiency <= 1:
            raise TopologyError(f"cost model: link efficiency must be in (0, 1], got "
                                f"{self.link_efficiency!r}")

    @property
    def is_empty(self) -> bool:
        return (self.message_overhead == 0 and self.message_latency == 0
                and self.host_bandwidth is None
                and not self.connection_fifo and self.link_efficiency == 1
                and self.staging_latency == 0 and self.host_cores is None)

    def to_dict(self) -> dict[str, object]:
        """The file format: ``message_overhead_us``, ``host_GBps``, ``source``."""
        data: dict[str, object] = {"message_overhead_us": self.message_overhead / US,
                                   "message_latency_us": self.message_latency / US}
        if self.host_bandwidth is not None:
            data["host_GBps"] = self.host_bandwidth / GB_PER_S
        data["connection_fifo"] = self.connection_fifo
        data["link_efficiency"] = self.link_efficiency
        if self.staging_latency:
            data["staging_latency_us"] = self.staging_latency / US
        if self.host_cores is not None:
            data["host_cores"] = self.host_cores
        if self.source:
            data["source"] = self.source
        return data


_FIELDS = {"message_overhead_us", "message_latency_us", "host_GBps", "connection_fifo",
           "link_efficiency", "staging_latency_us", "source", "host_cores"}


def from_dict(data: object, where: str) -> CostModel:
    """Read a topology file's ``cost_model`` object."""
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: field 'cost_model' must be an object with "
                            "message_overhead_us, host_GBps")
    unknown = set(data) - _FIELDS
    if unknown:
        raise TopologyError(f"{where}: cost_model: unknown field(s) {sorted(unknown)}; allowed:"
                            f" {sorted(_FIELDS)}")
    overhead = data.get("message_overhead_us", 0.0)
    latency = data.get("message_latency_us", 0.0)
    staging = data.get("staging_latency_us", 0.0)
    host = data.get("host_GBps")
    for name, value in (("message_overhead_us", overhead), ("message_latency_us", latency),
                        ("staging_latency_us", staging), ("host_GBps", host)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0
                                  or (name == "host_GBps" and value == 0)):
            raise TopologyError(f"{where}: cost_model.{name} must be a number "
                                f"{'> 0' if name == 'host_GBps' else '>= 0'}, got {value!r}")
    for name, value in (("message_overhead_us", overhead), ("message_latency_us", latency),
                        ("staging_latency_us", staging)):
        check_latency(f"{where}: cost_model.{name}", value)
    if host is not None:
        check_bandwidth(f"{where}: cost_model.host_GBps", host)
    fifo = data.get("connection_fifo", False)
    if not isinstance(fifo, bool):
        raise TopologyError(f"{where}: cost_model.connection_fifo must be true or false")
    efficiency = data.get("link_efficiency", 1.0)
    if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float)):
        raise TopologyError(f"{where}: cost_model.link_efficiency must be a number in (0, 1]")
    cores = data.get("host_cores")
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int)
                              or cores < 1):
        raise TopologyError(f"{where}: cost_model.host_cores must be a whole number >= 1, "
                            f"got {cores!r}")
    try:
        return CostModel(float(overhead) * US, float(latency) * US,
                         None if host is None else float(host) * GB_PER_S, fifo,
                         float(efficiency), float(staging) * US, str(data.get("source", "")),
                         cores)
    except TopologyError as error:
        raise TopologyError(f"{where}: {error}") from None
