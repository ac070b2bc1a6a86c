"""The job's key-value store (torch's ``TCPStore``): where it listens, who joined it.

The store carries the rendezvous and the notes that name dead ranks, and has no
authentication, so it listens only where the job needs it: on a loopback address (a job
on one host: ``ccweave run``'s launcher, or ``MASTER_ADDR=127.0.0.1``) on that address
alone, reachable from this host only. A job across hosts needs it on the network; then
:func:`host` returns a line saying what is exposed, for the rank that hosts it to print.

Every rank registers under its number when it joins and again once its process group is
up, so a second job started on the same ``MASTER_PORT`` is named instead of joining the
first one's rendezvous, and a rank that never came is named by the others.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from datetime import timedelta

from ccweave.errors import RuntimeFault

_PREFIX = "ccweave/joined/"


def is_loopback(addr: str) -> bool:
    """Whether every address ``addr`` resolves to is a loopback one (this host only)."""
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback
                               for info in infos)


def host(addr: str, port: int, world_size: int, timeout: timedelta,
         ) -> tuple[object, str | None]:
    """Host the store on ``addr:port`` (port 0: any free one).

    Returns the store and a line saying what is exposed when it listens beyond this host
    (``None`` on loopback). Raises ``RuntimeFault`` naming a port in use.
    """
    import torch.distributed as dist

    listener = None
    if is_loopback(addr):
        info = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(info[0], socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(info[4])
            listener.listen(max(128, world_size))
        except OSError as error:
            listener.close()
            raise RuntimeFault(_in_use(addr, port, error)) from None
        port = listener.getsockname()[1]
    try:
        store = dist.TCPStore(addr, port, world_size, is_master=True, wait_for_workers=False,
                              timeout=timeout,
                              **({} if listener is None else
                                 {"master_listen_fd": listener.fileno()}))
    except (RuntimeError, OSError) as error:
        if listener is not None:
            listener.close()
        raise RuntimeFault(_in_use(addr, port, error)) from None
    if listener is not None:
        listener.detach()  # the store owns the descriptor now and closes it when it goes
    exposed = None if listener is not None else (
        f"the job's key-value store (rendezvous and fault notes, no authentication) listens "
        f"on port {store.port} of every interface of this host, for the ranks on other "
        f"hosts ({addr} is not a loopback address): anyone who can reach it can read and "
        "change them; run on a trusted network or firewall the port")
    return store, exposed


def _in_use(addr: str, port: int, error: BaseException) -> str:
    reason = getattr(error, "strerror", None) or str(error).splitlines()[0][:120]
    return (f"cannot host the job's store on {addr}:{port} ({reason}); if another job's "
            "store holds that port (two jobs on one MASTER_PORT), give each job its own "
            "MASTER_PORT")


def join(addr: str, port: int, world_size: int, timeout: timedelta, rank: int) -> object:
    """A client of the store at ``addr:port``; ``RuntimeFault`` when none answers."""
    import torch.distributed as dist

    try:
        return dist.TCPStore(addr, port, world_size, is_master=False, timeout=timeout,
                             wait_for_workers=False)
    except (RuntimeError, OSError) as error:
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0][:120]
        raise RuntimeFault(f"rank {rank}: no job store answers at {addr}:{port} within "
                           f"{timeout.total_seconds():g} s ({reason}); start rank 0 (or the "
                           "launcher) first, and check MASTER_ADDR and MASTER_PORT") from None


def _attempt() -> str:
    """Keys of one attempt: torchrun restarts a job's ranks on the same store."""
    return os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")


def register(store: object, rank: int, stage: str, where: str) -> None:
    """Note that ``rank`` reached ``stage`` (``joined``, ``ready``); ``RuntimeFault`` when
    another process already did so under the same number: two jobs on one store."""
    count = store.add(f"{_PREFIX}{_attempt()}/{stage}/{rank}", 1)  # type: ignore[attr-defined]
    if count > 1:
        raise RuntimeFault(f"rank {rank}: another process already joined the job's store at "
                           f"{where} as rank {rank}: two jobs share one MASTER_ADDR:"
                           "MASTER_PORT (or a rank was started twice); give each job its own "
                           "MASTER_PORT")


def missing(store: object, world_size: int, stage: str) -> list[int]:
    """Ranks that have not reached ``stage`` (best effort: [] when the store is gone)."""
    with contextlib.suppress(Exception):
        keys = [f"{_PREFIX}{_attempt()}/{stage}/{rank}" for rank in range(world_size)]
        return [rank for rank, key in enumerate(keys)
                if not store.check([key])]  # type: ignore[attr-defined]
    return []
