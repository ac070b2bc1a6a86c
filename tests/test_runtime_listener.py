"""The ranks' data listener (runtime/transport/sockets.py) faces whoever can reach it:
only a rank that knows the job's secret is admitted, once per lane; an admitted rank's
lying header fails its lane, naming it, before anything is allocated for it; and a real
4-rank job attacked from this process finishes right, naming every attacker."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from ccweave.errors import InputError  # noqa: E402
from ccweave.runtime import secret  # noqa: E402
from ccweave.runtime.batch import classic_schedules  # noqa: E402
from ccweave.runtime.measure import Options, measure  # noqa: E402
from ccweave.runtime.program import OpKind, compile_program  # noqa: E402
from ccweave.runtime.transport.base import PeerFailure  # noqa: E402
from ccweave.runtime.transport.local import LocalFabric  # noqa: E402
from ccweave.runtime.transport.sockets import (  # noqa: E402
    EARLY_BYTES,
    PORTS_ENV,
    SocketTransport,
    data_ports,
)
from ccweave.topology.io import load  # noqa: E402
from tests.test_runtime_sockets import over_sockets  # noqa: E402

HEADER = struct.Struct("<qq")
HELLO = struct.Struct("<qqq")
INT64 = st.integers(-2**63, 2**63 - 1)


class LoneRank:
    """A SocketTransport as rank ``rank`` of ``world`` whose other ranks are this test: it
    dials the transport as any of them, with the job's secret or without."""

    def __init__(self, rank: int = 1, world: int = 2, given: bytes | None = None,
                 others_given: bool | None = None) -> None:
        self.job, self.secret = os.urandom(16), secret.new_secret().encode()
        if others_given is None:
            others_given = given is not None
        others = [("127.0.0.1", 9, others_given, (self.job, self.secret))
                  for _ in range(world)]

        def gather(mine: object) -> list:
            return [mine if r == rank else others[r] for r in range(world)]

        self.transport = SocketTransport(LocalFabric(world).transports()[rank], gather,
                                         "127.0.0.1", secret=given)
        self.rank = rank

    def dial(self, rank: int = 0, channel: int = 0, key: bytes | None = None,
             job: bytes | None = None, destination: int | None = None) -> socket.socket:
        """Connect as ``rank`` on ``channel`` with a hello MAC'd for ``destination``."""
        hello = HELLO.pack(rank, channel, -1)
        mac = secret.hello_mac(key or self.secret, job or self.job,
                               self.rank if destination is None else destination, hello)
        sock = socket.create_connection(self.transport.addresses[self.rank])
        sock.sendall(hello + mac)
        return sock

    def turn(self, until, seconds: float = 5.0) -> None:
        """Let the transport read until ``until()`` holds (its waits drive its sockets)."""
        deadline = time.monotonic() + seconds
        while not until():
            assert time.monotonic() < deadline, "the transport did not get there"
            self.transport._progress(0.01)

    def close(self) -> None:
        self.transport.close()


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def test_a_rank_with_the_secret_is_admitted_and_its_messages_arrive():
    lone = LoneRank()
    try:
        sock = lone.dial()
        out = torch.empty(16)
        handle = lone.transport.irecv(out, 0, tag=3)
        sock.sendall(HEADER.pack(3, 64) + torch.arange(16.0).numpy().tobytes())
        assert lone.transport.wait_some([handle], 5.0) == [0]
        assert torch.equal(out, torch.arange(16.0))
    finally:
        lone.close()


@pytest.mark.parametrize("forged", ["other key", "other job", "other rank"])
def test_a_hello_without_this_job_s_secret_for_this_rank_is_refused(forged, capsys):
    """The MAC covers the secret, the job and the dialled rank: a hello made with another
    key, for another job, or seen on its way to another rank opens nothing here."""
    lone = LoneRank(rank=1, world=3)
    try:
        sock = lone.dial(key=os.urandom(32) if forged == "other key" else None,
                         job=os.urandom(16) if forged == "other job" else None,
                         destination=2 if forged == "other rank" else None)
        lone.turn(lambda: not lone.transport._greeting and lone.transport.refused)
        line = capsys.readouterr().err
        assert (f"ccweave rank 1: refused a connection from {_address(sock)}: not a rank of "
                "this job (bad hello: claims rank 0 without the job's secret)") in line
        assert (0, 0, None, None) not in lone.transport.lanes
    finally:
        lone.close()


def test_a_second_connection_for_a_connected_lane_is_refused(capsys):
    """A hello replayed (or a second dial) does not take over a lane: the first
    connection keeps it and its messages still arrive."""
    lone = LoneRank()
    try:
        first = lone.dial()
        out = torch.empty(4)
        handle = lone.transport.irecv(out, 0, tag=1)
        lone.turn(lambda: lone.transport.lanes[(0, 0, None, None)].sock is not None)
        second = lone.dial()
        lone.turn(lambda: lone.transport.refused)
        assert (f"refused a connection from {_address(second)}: rank 0's lane on channel 0 "
                f"is connected already, from {_address(first)}") in capsys.readouterr().err
        second.sendall(HEADER.pack(1, 16) + bytes(16))
        first.sendall(HEADER.pack(1, 16) + torch.ones(4).numpy().tobytes())
        assert lone.transport.wait_some([handle], 5.0) == [0]
        assert torch.equal(out, torch.ones(4))
    finally:
        lone.close()


@settings(max_examples=60, deadline=None)
@given(tag=st.sampled_from([7]) | INT64,
       nbytes=st.sampled_from([0, 255, 257, EARLY_BYTES, EARLY_BYTES + 1, -1]) | INT64)
def test_an_admitted_rank_s_lying_header_fails_its_lane_and_allocates_nothing_beyond_the_cap(
        tag, nbytes):
    """A receive of 256 bytes with tag 7 is posted; the admitted peer sends a header that
    lies. One that contradicts the receive, or that no message could have (negative, over
    the host's memory), fails the lane with a PeerFailure naming the rank and its address;
    a plausible one for another tag is kept aside within the cap, or waits in the kernel.
    Nothing is allocated beyond the cap, and nothing else is raised."""
    if tag == 7 and nbytes == 256:
        return  # the truth
    lone = LoneRank()
    transport = lone.transport
    try:
        sock = lone.dial()
        handle = transport.irecv(torch.empty(256, dtype=torch.uint8), 0, tag=7)
        sock.sendall(HEADER.pack(tag, nbytes))
        lane = transport.lanes[(0, 0, None, None)]
        lie = tag == 7 or not 0 <= nbytes <= transport.memory
        failure = None

        def read() -> bool:
            nonlocal failure
            try:
                transport.wait_some([handle], 0.01)
            except PeerFailure as error:
                failure = error
            return (failure is not None or lane.stash is not None or lane.parked
                    or tag in lane.early)

        lone.turn(read)
        if lie:
            assert failure is not None and failure.peer == 0
            assert f"rank 0 ({_address(sock)}) sent a header of {nbytes} bytes" in \
                failure.detail
        else:
            assert failure is None
            assert lane.parked == (nbytes > transport.largest)
        assert lane.stash is None or len(lane.stash) <= transport.largest
    finally:
        lone.close()


@pytest.mark.parametrize("released_by", ["its receive", "a larger cap"])
def test_a_message_over_the_cap_waits_in_the_kernel_until_this_rank_catches_up(released_by):
    """A peer a size ahead sends a message longer than any this rank expects so far: it is
    not refused nor allocated, but left unread until its receive is posted or the executor
    expects messages that long, then read whole."""
    lone = LoneRank()
    transport = lone.transport
    try:
        sock = lone.dial()
        count = EARLY_BYTES // 4 + 256
        data = torch.arange(count, dtype=torch.float32)
        sock.sendall(HEADER.pack(5, count * 4))
        sender = threading.Thread(
            target=sock.sendall, args=(data.numpy().tobytes(),), daemon=True)
        sender.start()  # more than the kernel's buffers hold
        key = (0, 0, None, None)
        lone.turn(lambda: key in transport.lanes and transport.lanes[key].parked)
        lane = transport.lanes[key]
        assert lane.stash is None
        out = torch.empty(count)
        if released_by == "a larger cap":
            transport.expect_messages(count * 4)
            lone.turn(lambda: 5 in lane.early)
        handle = transport.irecv(out, 0, tag=5)
        lone.turn(lambda: handle.done)
        assert torch.equal(out, data)
        sender.join(5.0)
    finally:
        lone.close()


def test_every_schedule_tells_the_transport_its_largest_receive():
    """The executor caps what a peer may make a rank keep aside: the transport expects
    exactly the longest receive of the rank's program, however the sizes come."""
    schedule = dict(classic_schedules(load("switch:4"), ["allreduce"]))["ring"]
    size = 8 << 20  # a chunk's receive is over the default cap
    found = over_sockets(4, lambda t: (measure(schedule, t, [4096, size],
                                               Options(iters=1, warmup=0, modes=(False,))),
                                       t.largest)[1])
    chunk_bytes = size // schedule.collective.total_chunks
    for rank, largest in enumerate(found):
        program = compile_program(schedule, rank)
        expected = max(op.dst.count for op in program.ops if op.kind is OpKind.RECV)
        assert largest == expected * chunk_bytes > EARLY_BYTES


def test_a_secret_set_for_some_ranks_only_is_refused_naming_the_variable():
    with pytest.raises(InputError, match=r"CCWEAVE_JOB_SECRET is set for rank\(s\) 0 but "
                                         r"not for rank\(s\) 1"):
        LoneRank(rank=1, given=None, others_given=True)  # rank 0 (this test) has one
    lone = LoneRank(rank=1, given=b"s" * 32)
    assert lone.transport.secret == b"s" * 32
    lone.close()


def test_a_short_secret_is_refused_naming_the_variable():
    with pytest.raises(InputError, match="CCWEAVE_JOB_SECRET has 3 character"):
        secret.from_env({secret.ENV: "abc"})
    assert secret.from_env({}) is None


@pytest.mark.parametrize("text, ports", [("29600-29663", range(29600, 29664)),
                                         ("40000", range(40000, 40001)), ("", None)])
def test_data_ports_name_the_listeners_ports(text, ports):
    assert data_ports(text) == ports


@pytest.mark.parametrize("text", ["x", "5-3", "0-10", "65000-70000", "1-2-3"])
def test_data_ports_that_are_not_a_range_are_refused(text):
    with pytest.raises(InputError, match=f"{PORTS_ENV}={text!r} is not a port range"):
        data_ports(text)


# ------------------------------------------------------------------ a real job


def _listening(pid: int) -> set[int]:
    from tests.test_runtime_store import listening

    try:
        return {port for _, port in listening(pid)}
    except OSError:
        return set()


def _ranks(mark: str) -> dict[int, int]:
    """rank -> pid of the job's ranks (found through a marker in their environment)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                env = dict(p.split(b"=", 1) for p in handle.read().split(b"\0") if b"=" in p)
        except OSError:
            continue
        if env.get(b"CCWEAVE_TEST_MARK") == mark.encode() and b"RANK" in env:
            found[int(env[b"RANK"])] = int(pid)
    return found


def _attack(port: int, payload: bytes) -> str:
    """Send ``payload`` to a listener and hang up; the attacker's address."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        address = _address(sock)
        with contextlib.suppress(OSError):  # refused and closed before the rest went
            sock.sendall(payload)
    return address


HELLOS = st.tuples(st.sampled_from([0, 1, 2, 3, -1, 4]) | INT64,
                   st.sampled_from([0, 1, 63, 64, -1]) | INT64,
                   st.sampled_from([-1, 0, 5, 4097]) | INT64)
LIES = st.tuples(HELLOS, st.binary(max_size=40), INT64, INT64, st.integers(0, 64))


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs /proc")
def test_a_real_job_attacked_on_every_listener_finishes_right_and_names_each_attacker():
    """The issue's reproducer, and more: while ``ccweave run switch:4 allreduce`` runs,
    this process sends each rank's data listener the 40-byte lying message, 4 KB of
    random bytes, a well-formed hello claiming rank 0 without the secret's MAC, and
    hypothesis-drawn lying hellos and headers. The job exits 0 with 0 wrong elements and
    no traceback, and each rank names every attacker's address on stderr. (Each rank is
    held with SIGSTOP from the moment it listens until every attack is in its kernel,
    as a busy rank would be: a fast machine could end the job before the last one.)"""
    mark = uuid.uuid4().hex
    low = random.randrange(20000, 30000)  # under Linux's ephemeral ports
    env = dict(os.environ, CCWEAVE_TEST_MARK=mark, **{PORTS_ENV: f"{low}-{low + 199}"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "ccweave.cli", "run", "switch:4", "allreduce", "--nproc", "4",
         "--sizes", "4KB,256KB", "--iters", "20", "--warmup", "1", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held: list[int] = []
    try:
        ports: dict[int, int] = {}
        deadline = time.monotonic() + 180
        while len(ports) < 4:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            for rank, pid in _ranks(mark).items():
                ours = sorted(p for p in _listening(pid) if low <= p < low + 200)
                if ours and rank not in ports:
                    os.kill(pid, signal.SIGSTOP)
                    held.append(pid)
                    ports[rank] = ours[0]
            time.sleep(0.02)
        attackers: list[tuple[int, str]] = []
        for rank, port in sorted(ports.items()):
            for payload in (struct.pack("<qqq", 0, 0, -1) + struct.pack("<qq", 999999, 2**50),
                            os.urandom(4096),
                            HELLO.pack(0, 0, -1) + bytes(secret.MAC_BYTES)
                            + HEADER.pack(1, 2**40)):
                attackers.append((rank, _attack(port, payload)))
        turn = iter(range(10**6))

        @settings(max_examples=20, deadline=None, database=None)
        @given(LIES)
        def lie(drawn) -> None:
            (rank, channel, length), mac, tag, nbytes, cut = drawn
            payload = HELLO.pack(rank, channel, length) + mac + HEADER.pack(tag, nbytes)
            target = next(turn) % 4
            attackers.append((target, _attack(ports[target], payload[:len(payload) - cut])))

        lie()
        for pid in held:
            os.kill(pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=300)
    finally:
        for pid in held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert json.loads(out)["wrong"] == 0
    for rank, address in attackers:
        assert f"ccweave rank {rank}: refused a connection from {address}: " in err, \
            (rank, address, err)
