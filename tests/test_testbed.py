"""The netns testbed: the emulation plan follows the model (pure, everywhere); where the
host can build one (root, iproute2), namespaces and shaped veths come and go, a real job
runs with 0 wrong elements, and the profiler recovers an emulated link's bandwidth."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings

from ccweave.errors import InputError
from ccweave.profile import Profile, flat
from ccweave.testbed import Testbed, clear_testbeds, emulate, run_ranks, unavailable_reason
from ccweave.testbed.emulation import HOST_QUEUE_S, PREFIX, QUEUE_S, Emulation, scale_for
from ccweave.testbed.netns import CONGESTION_CONTROL, _tbf
from ccweave.topology import io as topology_io
from ccweave.topology.model import Link, NodeKind, Topology
from tests.strategies import topologies

REASON = unavailable_reason()
needs_netns = pytest.mark.skipif(REASON is not None, reason=REASON or "")
RAIL = "examples/topologies/rail-2x4.json"
SHARED_NIC = "examples/topologies/shared-nic-2x4.json"


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def star(rates_mbit: list[float], name: str = "star") -> Topology:
    """Ranks on one switch, each with its own uplink rate both ways."""
    links = []
    for rank, rate in enumerate(rates_mbit):
        bandwidth = rate * 1e6 / 8
        links += [Link(rank, "sw", bandwidth), Link("sw", rank, bandwidth)]
    return Topology(name, len(rates_mbit), tuple(links), {"sw": NodeKind.SWITCH})


def walk(emulation: Emulation, src: int, dst: int) -> list[tuple[object, object]]:
    """The links a packet from ``src`` to ``dst`` crosses, following the planned routes
    (source rules first, as the kernel's policy routing does)."""
    by_device = {}
    for wire in emulation.wires:
        by_device[wire.a.node, wire.a.device] = wire.b.node
        by_device[wire.b.node, wire.b.device] = wire.a.node
    hops, node = [], src
    while node != dst:
        routes = [r for r in emulation.routes if r.node == node and r.dst == dst]
        chosen = next((r for r in routes if r.src == src), None) or \
            next(r for r in routes if r.src is None)
        far = by_device[node, chosen.device]
        hops.append((node, far))
        node = far
        assert len(hops) <= len(emulation.topology.nodes), "routing loop"
    return hops


def model_hops(topology: Topology, src: int, dst: int) -> list[tuple[object, object]]:
    return [(topology.links[i].src, topology.links[i].dst) for i in topology.route(src, dst)]


@pytest.mark.parametrize("spec", [RAIL, SHARED_NIC, "dgx1", "ndv2:2", "mist"])
def test_every_pair_takes_the_models_route(spec):
    topology = topology_io.load(spec)
    emulation = emulate(topology)
    for src in topology.ranks:
        for dst in topology.ranks:
            if src != dst:
                assert walk(emulation, src, dst) == model_hops(topology, src, dst)


@settings(max_examples=40, deadline=None)
@given(topologies(min_ranks=2, max_ranks=6))
def test_routes_follow_the_model_on_random_topologies(topology):
    emulation = emulate(topology, max_rate_mbit=1e9)
    for src in topology.ranks:
        for dst in topology.ranks:
            if src == dst:
                continue
            hops = walk(emulation, src, dst)  # every pair reaches the other
            if topology.has_route(src, dst):
                assert hops == model_hops(topology, src, dst)
            else:  # relayed by ranks that forward (start-up traffic only)
                relayed = {a for a, _ in hops[1:]}
                assert relayed & set(topology.ranks) <= emulation.relays


def test_each_direction_is_shaped_at_its_links_bandwidth_times_the_scale():
    topology = topology_io.load(RAIL)
    emulation = emulate(topology)
    assert emulation.scale == 1.0  # 400 Mbit/s at most: shaped as it is
    assert len(emulation.wires) == 12 + 8  # 6 pairs in each node, 8 rails
    for wire in emulation.wires:
        for here, there in ((wire.a, wire.b), (wire.b, wire.a)):
            assert here.rate_bps == topology.link(here.node, there.node).bandwidth
    fast = topology_io.load("dgx1")
    scaled = emulate(fast, max_rate_mbit=400)
    assert scaled.scale == pytest.approx(400e6 / 8 / max(fast.bandwidths))
    assert scale_for(fast, 400) == scaled.scale
    assert scaled.to_machine_time(2.0) == pytest.approx(2.0 * scaled.scale)


def test_a_hosts_fabric_queues_deeper_than_ranks_and_switches():
    topology = topology_io.load(SHARED_NIC)
    ports = [port for wire in emulate(topology).wires for port in (wire.a, wire.b)]
    for port in ports:
        nic = topology.kind(port.node) is NodeKind.NIC
        assert port.queue_s == (HOST_QUEUE_S if nic else QUEUE_S)
        if port.rate_bps is not None:
            assert f"latency {round(port.queue_s * 1000)}ms" in _tbf(port)
    assert sum(p.queue_s == HOST_QUEUE_S for p in ports) == 2 * (4 + 1)  # the NICs' ports
    mist = topology_io.load("mist")
    cpus = [port for wire in emulate(mist).wires for port in (wire.a, wire.b)
            if not mist.is_rank(port.node)]
    assert cpus and all(port.queue_s == HOST_QUEUE_S for port in cpus)
    assert QUEUE_S < HOST_QUEUE_S < 0.5  # a lost packet must not cost seconds


class _Detour(Topology):
    """Rank 0's traffic to rank 2 leaves the hub through "alt", everyone else's
    straight (as equal-cost routes can come out of per-source shortest paths)."""

    def route(self, src, dst):
        if (src, dst) == (0, 2):
            return tuple(self.link_id[pair] for pair in ((0, "hub"), ("hub", "alt"),
                                                         ("alt", 2)))
        return super().route(src, dst)


def test_a_fabric_node_splits_one_destination_by_source_where_the_model_does():
    links = []
    for a, b in ((0, "hub"), (1, "hub"), ("hub", 2), ("hub", "alt"), ("alt", 2)):
        links += [Link(a, b, 100e6), Link(b, a, 100e6)]
    topology = _Detour("detour", 3, tuple(links), {"hub": NodeKind.SWITCH,
                                                   "alt": NodeKind.SWITCH})
    emulation = emulate(topology)
    rules = [route for route in emulation.routes if route.src is not None]
    assert [(r.node, r.dst) for r in rules] == [("hub", 2)]  # one source follows a rule
    for src in topology.ranks:
        for dst in topology.ranks:
            if src != dst:
                assert walk(emulation, src, dst) == model_hops(topology, src, dst)


def test_machines_that_cannot_be_emulated_faithfully_are_refused():
    with pytest.raises(InputError, match="one rank"):
        emulate(star([100]))
    with pytest.raises(InputError, match="raise --max-rate"):
        emulate(star([400, 0.001]), max_rate_mbit=400)


@needs_netns
def test_testbed_builds_shaped_links_and_cleans_up():
    topology = star([100, 200, 300])
    emulation = emulate(topology, tag="tst0", subnet=201)
    with Testbed(emulation) as bed:
        made = set(emulation.namespaces)
        assert made <= namespaces()
        device = emulation.data_device(2)
        shown = subprocess.run(["ip", "-n", emulation.namespace(2), "addr", "show", device],
                               capture_output=True, text=True).stdout
        assert emulation.address(2) in shown
        qdisc = subprocess.run(["tc", "-n", emulation.namespace(1), "qdisc", "show"],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc
        assert bed.command(0, ["true"])[:4] == ["ip", "netns", "exec", emulation.namespace(0)]
    assert not made & namespaces()
    with pytest.raises(RuntimeError), Testbed(emulation):
        raise RuntimeError("a failure inside")
    assert not made & namespaces()


@needs_netns
def test_an_interrupt_during_the_build_leaves_no_namespace(monkeypatch):
    """Ctrl-C (or SIGTERM) while a testbed is built is held until the build ends, then
    delivered: the testbed is removed before the interrupt goes on."""
    emulation = emulate(star([100, 100]), tag="tst8", subnet=209)
    build = Testbed._build

    def interrupted_build(self: Testbed) -> None:
        build(self)
        signal.raise_signal(signal.SIGINT)  # held by signals_deferred until the end

    monkeypatch.setattr(Testbed, "_build", interrupted_build)
    # Ctrl-C's usual handler: a shell starts a background job with SIGINT ignored (the
    # whole suite run with `&`), and an ignored interrupt is rightly never delivered
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), Testbed(emulation):
            pytest.fail("the interrupt was not delivered at the end of the build")
    finally:
        signal.signal(signal.SIGINT, before)
    assert not set(emulation.namespaces) & namespaces()


def test_an_interrupt_during_the_hosts_probe_leaves_no_probe_namespace(monkeypatch):
    """``testbed up`` first makes and removes a namespace to see that it can: a SIGTERM
    while ``ip netns add`` ran left ``ccwprobe<pid>`` on the host for good (no record
    names it, so no ``down`` removes it). The probe holds the signal, then delivers it."""
    from ccweave.testbed import netns

    ran: list[list[str]] = []

    def fake_run(command, **kwargs):
        ran.append(list(command))
        if command[:3] == ["ip", "netns", "add"]:
            signal.raise_signal(signal.SIGTERM)  # the user's kill, while `ip` runs
        return subprocess.CompletedProcess(command, 0, "", "")

    class Stopped(Exception):
        pass

    def stop(signum, frame):
        raise Stopped

    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: f"/sbin/{tool}")
    monkeypatch.setattr(netns.subprocess, "run", fake_run)
    before = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stopped):
            unavailable_reason()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert [command[:3] for command in ran] == [["ip", "netns", "add"],
                                                ["ip", "netns", "del"]]


@needs_netns
def test_every_namespace_uses_the_testbeds_congestion_control_not_the_hosts():
    """The host's default congestion control (which a namespace inherits; BBR on some
    hosts) does not decide how the emulated links are shared: every namespace uses
    :data:`CONGESTION_CONTROL`."""
    emulation = emulate(star([100, 200, 300]), tag="tst6", subnet=207)
    with Testbed(emulation):
        for name in emulation.namespaces:
            used = subprocess.run(["ip", "netns", "exec", name, "cat",
                                   "/proc/sys/net/ipv4/tcp_congestion_control"],
                                  capture_output=True, text=True, check=True).stdout
            assert used.strip() == CONGESTION_CONTROL, name


@needs_netns
def test_a_collective_runs_on_a_3_rank_testbed_with_no_wrong_element_and_no_leftover(tmp_path):
    pytest.importorskip("torch")
    topology = star([400, 400, 200], name="three")
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"name": "three", "ranks": 3, "fabric": {"sw": "switch"},
                                "links": [{"src": r, "dst": "sw", "bw_GBps": rate / 8000,
                                           "duplex": True}
                                          for r, rate in enumerate([400, 400, 200])]}))
    emulation = emulate(topology, tag="tst1", subnet=202)
    with Testbed(emulation) as bed:
        made = set(emulation.namespaces)
        outputs = run_ranks(bed, ["run", str(path), "allreduce", "--strategy", "ring",
                                  "--sizes", "64KB,1MB", "--iters", "2", "--warmup", "1",
                                  "--json"], timeout=120)
    report = json.loads(outputs[0][outputs[0].index("{"):])
    assert report["ranks"] == 3 and len(report["rows"]) == 2
    assert report["wrong"] == 0
    assert all(row["out_of_place"]["wrong"] == 0 for row in report["rows"])
    assert not made & namespaces()


@needs_netns
def test_clearing_a_tag_removes_that_testbed_whoever_runs_it():
    emulation = emulate(star([100, 100]), tag="tst2", subnet=203)
    bed = Testbed(emulation)
    bed.__enter__()  # still held by this process
    try:
        assert set(emulation.namespaces) <= namespaces()
        done = clear_testbeds(emulation.tag)
        assert done.namespaces == len(emulation.namespaces)
        assert not set(emulation.namespaces) & namespaces()
    finally:
        bed.close()


def kill_processes_with(marker: str) -> None:
    """SIGKILL whatever a failed test left running with ``marker`` in its command line."""
    for pid in processes_with(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def ranks_in_testbeds(marker: str) -> dict[int, str]:
    """Pids whose command line holds ``marker`` and that run in a testbed's namespace,
    with its name (not the launcher, whose command line holds it too, nor its forks)."""
    found = {}
    for pid in processes_with(marker):
        name = subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True,
                              text=True).stdout.strip()
        if name.startswith(PREFIX):
            found[pid] = name
    return found


def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


@needs_netns
def test_ccweave_ranks_do_not_outlive_a_killed_launcher(tmp_path):
    """A launcher killed outright (SIGKILL: no clean-up runs) takes its ranks with it.
    (A killed ``ccweave bench`` once left 8 ranks running for minutes.)"""
    marker = f"ccweave-orphan-check-{os.getpid()}"
    rank = ("from ccweave.runtime.launch import die_with_parent; import time; "
            f"die_with_parent(); time.sleep(60)  # {marker}")
    launcher = ("from ccweave.testbed import Testbed, emulate, run_ranks\n"
                "from tests.test_testbed import star\n"
                "bed = Testbed(emulate(star([100, 100]), tag='tst5', subnet=206)).__enter__()\n"
                f"run_ranks(bed, [{sys.executable!r}, '-c', {rank!r}], module=None, timeout=90)")
    # the killed launcher's folder of rank logs stays behind: in tmp_path
    proc = subprocess.Popen([sys.executable, "-c", launcher],
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 90  # a loaded 2-core host starts them slowly
        while len(processes_with(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the launcher and its two ranks
        assert len(processes_with(marker)) >= 3, "the ranks did not start"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not processes_with(marker)
    finally:
        proc.kill()
        kill_processes_with(marker)
        clear_testbeds("tst5")


@needs_netns
def test_a_sigterm_to_the_command_tears_the_testbed_down(tmp_path):
    """``kill``, a job scheduler or ``timeout`` stop a command as Ctrl-C does: ranks
    stopped, namespaces removed, exit 143 (it once left a bench's 11 namespaces)."""
    marker = f"ccweave-sigterm-check-{os.getpid()}"
    path = tmp_path / "pair.json"
    path.write_text(json.dumps({"name": "pair", "ranks": 2, "fabric": {"sw": "switch"},
                                "links": [{"src": r, "dst": "sw", "bw_GBps": 0.0125,
                                           "duplex": True} for r in range(2)]}))
    rank = f"import time; time.sleep(60)  # {marker}"
    proc = subprocess.Popen([sys.executable, "-m", "ccweave.cli", "testbed", "run", str(path),
                             "--", sys.executable, "-c", rank],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 90  # a loaded 2-core host starts them slowly
        while len(ranks_in_testbeds(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        ranks = ranks_in_testbeds(marker)
        assert len(ranks) >= 2, "the ranks did not start"
        # ccw<tag>: other workers run testbeds too (netns.fresh_tag's four characters)
        ours = {name[:len(PREFIX) + 4] for name in ranks.values()}
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM
        assert "interrupted (SIGTERM)" in err
        assert not [name for name in namespaces() if name.startswith(tuple(ours))]
        assert not processes_with(marker)
        assert not list(tmp_path.glob("ccweave-*"))
    finally:
        proc.kill()
        kill_processes_with(marker)


@needs_netns
def test_closing_a_testbed_stops_what_still_runs_in_its_namespaces():
    """A process the launcher lost track of (a SIGTERM while a rank was being started)
    would keep its deleted namespace alive; the teardown stops it."""
    marker = f"ccweave-stray-check-{os.getpid()}"
    bed = Testbed(emulate(star([100, 100]), tag="tst7", subnet=208)).__enter__()
    try:
        stray = subprocess.Popen(bed.command(1, [sys.executable, "-c",
                                                 f"import time; time.sleep(60)  # {marker}"]),
                                 start_new_session=True)
        deadline = time.monotonic() + 10
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(marker), "the stray process did not start"
        bed.close()
        assert stray.wait(timeout=5) == -signal.SIGKILL
        assert not processes_with(marker)
    finally:
        bed.close()
        kill_processes_with(marker)
        clear_testbeds("tst7")


@needs_netns
def test_profile_recovers_the_emulated_bandwidth(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "profile.json"
    rate = 800
    with Testbed(emulate(star([rate, rate]), max_rate_mbit=rate, tag="tst3", subnet=204)) as bed:
        run_ranks(bed, ["profile", "--sizes", "256KB:16MB", "--iters", "5", "--warmup", "1",
                        "--no-cuda", "--worker-out", str(out)], timeout=150)
    profile = Profile.load(out)
    fit = profile.pair(0, 1).curve.fit
    configured = rate * 1e6 / 8
    assert fit.bandwidth == pytest.approx(configured, rel=0.10)
    assert fit.r2 > 0.95  # 0.9999 on a quiet host; a loaded one (the suite on 2 cores) ~0.98
    assert flat(profile).route_bandwidth(0, 1) == pytest.approx(fit.bandwidth)


def test_testbed_commands_say_why_when_the_host_cannot_build_one(monkeypatch):
    from ccweave.testbed import netns

    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "root" in netns.unavailable_reason()
    done = subprocess.run([sys.executable, "-c",
                           "import os; os.geteuid = lambda: 1000;"
                           "from ccweave.cli import main; raise SystemExit(main(['testbed', "
                           "'up', 'ring:4']))"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "root" in done.stderr and "Traceback" not in done.stderr


def test_a_pinned_route_has_addresses_whose_packets_take_its_links():
    topology = topology_io.load("examples/topologies/two-rails.json")
    plain = emulate(topology)
    emulation = emulate(topology, pinned=[(0, 1, ("rail1",)), (1, 0, ("rail0",))])
    assert plain.routes == emulation.routes  # the usual paths stay as they were
    there, back = emulation.pinned
    assert [hop.node for hop in there.hops] == [0, "rail1"]
    assert [hop.node for hop in there.back] == [1, "rail1"]
    assert [hop.node for hop in back.hops] == [1, "rail0"]
    addresses = {there.src_address, there.dst_address, back.src_address, back.dst_address}
    assert len(addresses) == 4 and not addresses & {emulation.address(r) for r in (0, 1)}
    again = emulate(topology, pinned=[(0, 1, ("rail1",)), (1, 0, ("rail0",)),
                                      (0, 1, ("rail0",))])
    assert again.pinned[:2] == emulation.pinned  # more routes keep the earlier addresses


@needs_netns
def test_a_striped_message_crosses_both_rails(tmp_path):
    """Multipath over two rails: each rail's token bucket carries about half the bytes."""
    pytest.importorskip("torch")
    from ccweave.compare import build_verified
    from ccweave.runtime.batch import Case, save
    from ccweave.runtime.transport.sockets import ROUTES_ENV

    topology = topology_io.load("examples/topologies/two-rails.json")
    size = 4 << 20
    schedule = build_verified(topology, "sendrecv", "multipath", size=size)
    pinned = {(t.src, t.dst, t.via) for t in schedule.transfers if t.via is not None}
    assert pinned  # one of the rails is not the pair's usual route
    emulation = emulate(topology, max_rate_mbit=800, tag="tst4", subnet=205)
    save([Case("striped", schedule, (size,), modes=(False,))], tmp_path / "cases.json")
    with Testbed(emulation) as bed:
        bed.pin(sorted(pinned, key=str))
        run_ranks(bed, [str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
                  module="ccweave.runtime.batch", timeout=120,
                  env={ROUTES_ENV: bed.routes_file(tmp_path)})
        sent = {}
        for device in bed.emulation.devices(0):
            shown = subprocess.run(["tc", "-s", "-n", bed.emulation.namespace(0), "qdisc",
                                    "show", "dev", device], capture_output=True,
                                   text=True).stdout
            sent[device] = int(shown.split("Sent ")[1].split()[0])
    result = json.loads((tmp_path / "out.json").read_text())[0]
    assert result["out_of_place"]["wrong"] == 0
    assert len(sent) == 2 and min(sent.values()) > 0.4 * size  # both rails carried half


def test_bench_refuses_outputs_it_cannot_write_before_measuring(tmp_path):
    """A plot or model path in a missing folder failed after the whole measurement (11
    minutes of the testbed benchmark lost); now it is refused first, in one line."""
    for flag, value in (("--plot", str(tmp_path / "nowhere" / "rail")),
                        ("--save-model", str(tmp_path / "nowhere" / "model.json"))):
        done = subprocess.run(
            [sys.executable, "-m", "ccweave.cli", "bench", "ring:3", "allreduce",
             "--testbed", "none", flag, value], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "no such directory" in done.stderr and flag in done.stderr
        assert "Traceback" not in done.stderr and "calibrat" not in done.stderr


@needs_netns
def test_bench_measures_schedules_and_gloo_beside_the_prediction(tmp_path):
    pytest.importorskip("torch")
    baselines = "gloo,mpi" if shutil.which("mpirun") else "gloo"
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"name": "three", "ranks": 3, "fabric": {"sw": "switch"},
                                "links": [{"src": r, "dst": "sw", "bw_GBps": 0.05,
                                           "duplex": True} for r in range(3)]}))
    done = subprocess.run(
        [sys.executable, "-m", "ccweave.cli", "bench", str(path), "allreduce", "--sizes",
         "256KB", "--strategies", "ring,trees,auto", "--baselines", baselines,
         "--no-calibrate", "--reps", "1", "--json"], capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {row["algorithm"]: row for row in report["rows"]}
    # trees pins its transfers to routes (addresses of their own on the testbed), which
    # Open MPI, on the same namespaces right after, must not try to reach
    assert set(rows) == {"ring", "trees", "auto", "gloo all_reduce"} | (
        {"MPI_Allreduce"} if "mpi" in baselines else set())
    assert all(row["wrong"] == 0 and row["measured_s"] > 0 for row in rows.values())
    assert rows["ring"]["predicted_s"] > 0 and rows["gloo all_reduce"]["predicted_s"] is None
    assert report["testbed"] == "netns" and report["load_average"]["cores"] >= 1
