"""ccweave's own TCP connections (runtime/transport/sockets.py), ranks as threads on
loopback: every classic schedule runs right over them, a message that arrives before its
receive is kept, channels and pinned routes get connections of their own, and a peer
that goes away is named."""

from __future__ import annotations

import socket
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from ccweave.runtime.batch import classic_schedules  # noqa: E402
from ccweave.runtime.measure import Options, measure  # noqa: E402
from ccweave.runtime.transport.base import PeerFailure  # noqa: E402
from ccweave.runtime.transport.local import run_threads  # noqa: E402
from ccweave.runtime.transport.sockets import (  # noqa: E402
    BUFFER_BYTES,
    SocketTransport,
    read_routes,
)
from ccweave.topology.io import load  # noqa: E402


def over_sockets(world: int, work, routes=None):
    """Run ``work(transport)`` on ``world`` thread ranks, each a SocketTransport on
    loopback over the in-process fabric (which keeps barriers and sums)."""
    slots: list[object] = [None] * world
    met = threading.Barrier(world)

    def wrapped(inner):
        def gather(obj):
            slots[inner.rank] = obj
            met.wait()
            out = list(slots)
            met.wait()
            return out

        transport = SocketTransport(inner, gather, "127.0.0.1", routes)
        try:
            return work(transport)
        finally:
            transport.barrier()
            transport.close()

    return run_threads(world, wrapped)


def wait_all(transport, handles, seconds: float = 30.0) -> None:
    """Wait until every handle is done, failing (not hanging) after ``seconds``."""
    left, deadline = list(handles), time.monotonic() + seconds
    while left:
        assert time.monotonic() < deadline, f"{len(left)} of {len(handles)} still pending"
        done = transport.wait_some(left, 1.0)
        left = [handle for n, handle in enumerate(left) if n not in done]


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter", "alltoall",
                                  "broadcast"])
def test_every_classic_schedule_runs_right_over_the_sockets(kind):
    topology = load("switch:4")
    for strategy, schedule in classic_schedules(topology, [kind]):
        rows = over_sockets(4, lambda t, s=schedule: measure(
            s, t, [4096, 1 << 18], Options(iters=1, warmup=0)))
        for row in rows[0]:
            assert row.out_of_place.wrong == 0, (strategy, row)
            assert row.in_place.skipped or row.in_place.wrong == 0, (strategy, row)


def test_a_message_that_comes_before_its_receive_is_kept():
    def work(transport):
        data = torch.arange(1000, dtype=torch.float32)
        if transport.rank == 0:
            sends = [transport.isend(data * k, 1, tag=k) for k in range(3)]
            transport.wait_some(sends, 10.0)
            return None
        time.sleep(0.3)  # everything has arrived before anything is posted
        got = []
        for k in (2, 0, 1):  # and it is posted in another order
            out = torch.empty(1000)
            handle = transport.irecv(out, 0, tag=k)
            while not transport.wait_some([handle], 10.0):
                pass
            got.append((k, out))
        return got

    _, got = over_sockets(2, work)
    for k, out in got:
        assert torch.equal(out, torch.arange(1000, dtype=torch.float32) * k)


def test_a_landed_message_is_heard_of_beside_finished_sends():
    """A rank whose sends finish at once still reads what has arrived in the same wait:
    the executor must hear of the receive that gates its next step (on the rail testbed
    trees' first reductions waited ~100 ms behind later chunks' sends)."""
    def work(transport):
        if transport.rank == 1:
            transport.wait_some([transport.isend(torch.ones(1000), 0, tag=1)], 10.0)
            transport.wait_some([transport.irecv(torch.empty(10), 0, tag=2)], 10.0)
            return None
        out = torch.empty(1000)
        receive = transport.irecv(out, 1, tag=1)  # the lower rank dials: connected now
        time.sleep(0.3)  # the message is in this rank's socket
        send = transport.isend(torch.ones(10), 1, tag=2)  # into the kernel at once
        return transport.wait_some([send, receive], 10.0), out

    (done, out), _ = over_sockets(2, work)
    assert done == [0, 1]
    assert torch.equal(out, torch.ones(1000))


def test_many_queued_messages_arrive_whole_through_small_buffers(monkeypatch):
    """Messages queued faster than a small kernel buffer takes them go out in pieces (one
    ``sendmsg`` may end inside a header or a message): each still arrives whole and in
    its place, empty ones included."""
    monkeypatch.setattr("ccweave.runtime.transport.sockets.BUFFER_BYTES", 4096)
    sizes = [0, 1, 3, 1000, 50_000, 0, 7, 20_000] * 12

    def work(transport):
        if transport.rank == 0:
            sends = [transport.isend(torch.arange(n, dtype=torch.float32) + k, 1, tag=k)
                     for k, n in enumerate(sizes)]
            wait_all(transport, sends)
            return None
        time.sleep(0.2)  # the sender's queue has filled the buffers
        outs = [torch.empty(n) for n in sizes]
        handles = [transport.irecv(out, 0, tag=k) for k, out in enumerate(outs)]
        wait_all(transport, handles)
        return outs

    _, outs = over_sockets(2, work)
    for k, (n, out) in enumerate(zip(sizes, outs)):
        assert torch.equal(out, torch.arange(n, dtype=torch.float32) + k), k


def test_channels_and_pinned_routes_each_get_a_connection():
    routes = {(0, 1, ("rail1",)): ("127.0.0.1", "127.0.0.1")}

    def work(transport):
        data = torch.ones(64)
        if transport.rank == 0:
            handles = [transport.isend(data, 1, 7, channel=c, route=r)
                       for c, r in ((0, None), (1, None), (0, ("rail1",)), (0, ()))]
        else:
            handles = [transport.irecv(torch.empty(64), 0, 7, channel=c, route=r)
                       for c, r in ((0, None), (1, None), (0, ("rail1",)), (0, ()))]
        wait_all(transport, handles)
        return set(transport.lanes)

    lanes0, lanes1 = over_sockets(2, work, routes)
    assert lanes0 == {(1, 0, None, None), (1, 1, None, None), (1, 0, ("rail1",), True),
                      (1, 0, (), True)}
    assert lanes1 == {(0, 0, None, None), (0, 1, None, None), (0, 0, ("rail1",), False),
                      (0, 0, (), False)}


def test_a_pinned_route_used_both_ways_is_two_connections():
    """Each rank sends to the other on the same channel and route: the connection each
    one dials carries its sends, the one it accepts its receives (one shared lane hung
    the trees strategy, which pins every transfer)."""
    def work(transport):
        peer = 1 - transport.rank
        out = torch.empty(256)
        handles = [transport.isend(torch.full((256,), float(transport.rank)), peer, 3,
                                   route=()),
                   transport.irecv(out, peer, 3, route=())]
        left = [0, 1]
        while left:
            done = transport.wait_some([handles[i] for i in left], 10.0)
            left = [i for n, i in enumerate(left) if n not in done]
        return out[0].item(), sorted(lane[3] for lane in transport.lanes)

    (got0, ways0), (got1, ways1) = over_sockets(2, work)
    assert (got0, got1) == (1.0, 0.0)
    assert ways0 == ways1 == [False, True]


def test_both_ends_of_a_connection_may_open_a_wide_receive_window():
    """TCP clamps a connection's receive window by the buffer it had at the handshake: a
    buffer set afterwards left every connection at 64-117 KB, one window a round trip
    (on the shared-NIC testbed a lower rank's sends to a higher one ran at a third of the
    other direction's rate). The dialling and the accepting end both open megabytes."""
    def work(transport):
        peer = 1 - transport.rank
        out = torch.empty(1024)
        handles = [transport.isend(torch.ones(1024), peer, 5), transport.irecv(out, peer, 5)]
        left = [0, 1]
        while left:
            done = transport.wait_some([handles[i] for i in left], 10.0)
            left = [i for n, i in enumerate(left) if n not in done]
        return [lane.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP)
                for lane in transport.lanes.values()]

    dialled, accepted = over_sockets(2, work)
    assert len(dialled) == len(accepted) == 1
    assert min(dialled + accepted) >= BUFFER_BYTES // 2


def newer_strategies():
    from ccweave.synth.registry import strategies

    for strategy in strategies().values():
        if not strategy.classic and not strategy.slow:
            for kind in sorted(strategy.collectives):
                yield pytest.param(strategy.name, kind, id=f"{strategy.name}-{kind.value}")


@pytest.mark.parametrize("strategy,kind", list(newer_strategies()))
def test_every_newer_strategy_runs_right_over_the_sockets(strategy, kind):
    """Strategies that pin routes (trees pins every arc, multipath its paths) or use many
    channels, on a ring where each pair sends both ways."""
    from ccweave.errors import NotApplicableError
    from ccweave.synth.registry import synthesize

    topology = load("ring:4")
    try:
        schedule = synthesize(topology, kind, strategy)
    except NotApplicableError as error:
        pytest.skip(str(error))
    size = schedule.collective.total_chunks * 4 * 64
    rows = over_sockets(schedule.num_ranks, lambda t: measure(
        schedule, t, [size], Options(iters=1, warmup=0)))
    assert rows[0][0].out_of_place.wrong == 0
    assert rows[0][0].in_place.wrong in (0, None)


def test_a_peer_that_goes_away_is_named():
    def work(transport):
        if transport.rank == 1:
            handle = transport.irecv(torch.empty(4), 0, 1)  # rank 0 connects to it
            transport.wait_some([handle], 10.0)
            transport.barrier()
            for lane in transport.lanes.values():
                if lane.sock is not None:
                    lane.sock.close()
            transport.barrier()
            return None
        handle = transport.isend(torch.ones(4), 1, 1)
        transport.wait_some([handle], 10.0)
        transport.barrier()
        transport.barrier()
        stuck = transport.irecv(torch.empty(4), 1, 2)
        with pytest.raises(PeerFailure) as failure:
            transport.wait_some([stuck], 10.0)
        return failure.value

    failure, _ = over_sockets(2, work)
    assert failure.peer == 1 and "rank 1" in failure.detail


def test_a_bad_routes_file_is_refused_naming_it(tmp_path):
    from ccweave.errors import InputError

    path = tmp_path / "routes.json"
    path.write_text('[{"src": 0}]')
    with pytest.raises(InputError, match=r"routes\.json"):
        read_routes(str(path))
    assert read_routes(None) == {}


def test_a_route_that_cannot_be_dialled_is_named():
    """A pinned route whose local address is not this host's fails its messages with a
    line naming the peer, the address and the route, not a traceback from the dial."""
    routes = {(0, 1, ("rail9",)): ("10.254.254.254", "127.0.0.1")}

    def work(transport):
        if transport.rank == 1:
            return None
        handle = transport.isend(torch.ones(8), 1, 5, route=("rail9",))
        with pytest.raises(PeerFailure) as failed:
            transport.wait_some([handle], 10.0)
        return failed.value.detail

    detail, _ = over_sockets(2, work, routes)
    assert "cannot connect to rank 1" in detail and "route rail9" in detail
    assert "10.254.254.254" in detail
