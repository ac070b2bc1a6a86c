"""The job's key-value store listens only where the job needs it: on loopback for a job on
one host (``ccweave run``'s launcher, ``MASTER_ADDR=127.0.0.1``); a job across hosts says
what it exposes. Two jobs on one port, and a second rank under one number, are named."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest

pytest.importorskip("torch")

from ccweave.errors import RuntimeFault
from ccweave.runtime import store as job_store

WAIT = timedelta(seconds=5)
needs_proc = pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs /proc")


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on, from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        with open(table) as handle:
            next(handle)
            for line in handle:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                if width == 4:
                    raw = raw[::-1]
                else:  # four little-endian 32-bit words
                    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                found.append((str(ipaddress.ip_address(raw)), int(port, 16)))
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


@needs_proc
def test_a_store_on_a_loopback_address_listens_there_only():
    store, exposed = job_store.host("127.0.0.1", 0, 2, WAIT)
    assert exposed is None
    sockets = [s for s in listening(os.getpid()) if s[1] == store.port]
    assert sockets and all(_is_loopback(address) for address, _ in sockets), sockets
    client = job_store.join("127.0.0.1", store.port, 2, WAIT, 1)
    client.set("k", "v")
    assert store.get("k") == b"v"


def test_a_store_for_other_hosts_says_what_it_exposes():
    store, exposed = job_store.host("0.0.0.0", 0, 2, WAIT)
    assert exposed is not None
    assert f"port {store.port} of every interface" in exposed
    assert "no authentication" in exposed and "trusted network" in exposed


def test_a_port_in_use_and_a_rank_joining_twice_are_named():
    store, _ = job_store.host("127.0.0.1", 0, 2, WAIT)
    with pytest.raises(RuntimeFault, match="two jobs on one MASTER_PORT"):
        job_store.host("127.0.0.1", store.port, 2, WAIT)
    job_store.register(store, 1, "joined", "here")
    with pytest.raises(RuntimeFault, match=r"already joined .* as rank 1: two jobs share"):
        job_store.register(store, 1, "joined", "here")
    assert job_store.missing(store, 3, "joined") == [0, 2]


def test_no_store_answering_is_one_line():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RuntimeFault, match=f"no job store answers at 127.0.0.1:{port}"):
        job_store.join("127.0.0.1", port, 2, timedelta(seconds=1), 1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _env_rank(rank: int, world: int, port: int, addr: str, topology: str,
              *extra: str) -> subprocess.Popen:
    """``ccweave run TOPOLOGY allreduce`` as one rank of an env-launched job."""
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR=addr,
               MASTER_PORT=str(port), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1",
               TORCH_CPP_LOG_LEVEL="ERROR")
    for key in ("TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK"):
        env.pop(key, None)
    return subprocess.Popen([sys.executable, "-m", "ccweave.cli", "run", topology,
                             "allreduce", "--sizes", "64KB", "--warmup", "0", "--modes",
                             "out", *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@needs_proc
def test_a_second_job_on_the_same_master_port_is_named_and_the_first_runs_on():
    port = _free_port()
    first = [_env_rank(rank, 2, port, "127.0.0.1", "switch:2", "--iters", "1000000",
                       "--timeout", "30") for rank in (0, 1)]
    try:
        deadline = time.monotonic() + 120
        while not any(port == p for _, p in listening(first[0].pid)):  # job A's store is up
            assert time.monotonic() < deadline and first[0].poll() is None
            time.sleep(0.2)
        time.sleep(3.0)  # and its ranks joined it
        second = [_env_rank(rank, 2, port, "127.0.0.1", "switch:2", "--iters", "1")
                  for rank in (0, 1)]
        errors = [proc.communicate(timeout=120)[1] for proc in second]
        assert [proc.returncode for proc in second] == [2, 2], errors
        assert "two jobs on one MASTER_PORT" in errors[0]
        assert "two jobs share one MASTER_ADDR:MASTER_PORT" in errors[1]
        assert [proc.poll() for proc in first] == [None, None]  # job A was not disturbed
    finally:
        for proc in first:
            proc.kill()
            proc.communicate()


def test_a_rank_hosting_the_store_for_other_hosts_says_what_it_exposes(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"name": "one", "ranks": 1, "fabric": {"sw": "switch"},
                               "links": [{"src": 0, "dst": "sw", "bw_GBps": 1}]}))
    port = _free_port()
    proc = _env_rank(0, 1, port, "0.0.0.0", str(one), "--iters", "1", "--sizes", "1KB")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "ccweave: rank 0: the job's key-value store" in err
    assert f"listens on port {port} of every interface" in err
