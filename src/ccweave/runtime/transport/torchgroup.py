"""The transport ``ccweave.torch`` gives a ``torch.distributed`` process group: what
``ccweave run`` and ``bench`` run on.

- gloo: ccweave's own connections (:mod:`.sockets`, admitted with the job's secret),
  shared memory between the group's ranks on one host (:mod:`.shm`); the group itself
  keeps the rendezvous (where each rank listens, the secret when the launcher gave
  none) and the fault notes. Gloo's own send and receive carry the data only as a
  fallback, said once in one line naming why (``CCWEAVE_SOCKETS=0``, no address to
  listen on).
- NCCL: NCCL's point-to-point calls, stream-ordered (:mod:`.torchdist`).
"""

from __future__ import annotations

import os
import socket

import torch.distributed as dist

from ccweave.errors import say
from ccweave.runtime.transport.base import Transport
from ccweave.runtime.transport.torchdist import TorchTransport

_said: set[str] = set()
"""Fallback lines printed by this process (each once)."""


def group_transport(group: dist.ProcessGroup) -> tuple[Transport, str | None]:
    """``group``'s transport and, where gloo's send and receive carry its data, why
    (``None``: ccweave's own connections do). Every rank of the group calls it (it
    gathers over the group); every rank gets the same answer."""
    inner = TorchTransport(None if group is dist.group.WORLD else group)
    if inner.stream_ordered:  # NCCL
        return inner, None
    from ccweave.runtime.transport.shm import with_shared_memory

    if inner.name != "gloo":
        why = (f"the group's backend is {inner.name!r}; ccweave's own connections ride "
               "beside gloo")
        return inner, why
    address, why = _address()
    every = [None] * inner.world_size
    dist.all_gather_object(every, (address, why, _host()), group=group)
    reasons = [(rank, reason) for rank, (_, reason, _) in enumerate(every) if reason]
    if not reasons and any(a is None for a, _, _ in every):
        if len({host for _, _, host in every}) == 1:  # one host: loopback reaches all
            address = "127.0.0.1"
        else:
            ranks = [rank for rank, (a, _, _) in enumerate(every) if a is None]
            reasons = [(ranks[0], f"rank(s) {', '.join(map(str, ranks))} have no "
                                  "MASTER_ADDR to find their own address by (set it, as "
                                  "torchrun does)")]
    if reasons:
        reason = reasons[0][1]
        alike = [r for r, why in reasons if why == reason]
        if len(alike) < inner.world_size and not reason.startswith("rank("):
            reason += f" on rank(s) {', '.join(map(str, alike))}"
        return with_shared_memory(inner, group=group), reason
    from ccweave.runtime.transport.sockets import with_sockets

    return with_shared_memory(with_sockets(inner, address, group), group=group), None


def say_fallback(group_rank: int, ranks: int, why: str) -> None:
    """The fallback's one line, on the group's rank 0, once per process and reason."""
    if group_rank != 0 or why in _said:
        return
    _said.add(why)
    say(f"ccweave.torch: a group of {ranks} ranks moves its data with gloo's send and "
        f"receive, which cannot be polled (a slow link holds up the rest), because {why}")


def _address() -> tuple[str | None, str | None]:
    """(the address this rank's data listener takes, why there is none to be had)."""
    if os.environ.get("CCWEAVE_SOCKETS", "1") == "0":
        return None, "CCWEAVE_SOCKETS=0 is set"
    peer = os.environ.get("MASTER_ADDR") or _store_host()
    if not peer:
        return None, None  # fine if every rank is on one host (decided over the group)
    from ccweave.runtime.transport.sockets import local_address

    try:
        return local_address(peer), None
    except OSError as error:
        return None, f"no route to MASTER_ADDR={peer} ({error.strerror or error})"


def _store_host() -> str | None:
    """The host of the default group's TCP store (``init_method="tcp://HOST:PORT"``)."""
    try:
        store = dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store.host if isinstance(store, dist.TCPStore) else None


def _host() -> str:
    """What tells hosts apart: name, boot, network namespace (testbed hosts share a
    kernel but not a network)."""
    from ccweave.runtime.transport.shm import _boot_id, _net_namespace

    return socket.gethostname() + _boot_id() + _net_namespace()
