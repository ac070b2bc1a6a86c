"""Build and tear down an :class:`~ccweave.testbed.emulation.Emulation` with iproute2:
network namespaces, veth pairs, ``tc tbf`` shaping, static routes and neighbours. Needs
root. ``ip -batch`` and ``tc -batch`` keep a 40-namespace machine to a few seconds.

A testbed is torn down whatever happens (``with Testbed(...)``: errors, Ctrl-C, and a
SIGKILL through its guard process); :func:`~ccweave.testbed.cleanup.clear_testbeds`
removes what ``testbed up`` left standing (``ccweave testbed down``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ccweave.errors import CCWeaveError, LimitError
from ccweave.testbed import records
from ccweave.testbed.emulation import (
    DEFAULT_MAX_NAMESPACES,
    MTU,
    PREFIX,
    Emulation,
    Port,
    free_subnet,
    rank_address,
)
from ccweave.testbed.guard import Guard, delete

Progress = Callable[[int, int], None]
_TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamps 12
_ETHERNET_HEADER = 14
WIRE_PER_PAYLOAD = (MTU + _ETHERNET_HEADER) / (MTU - _TCP_IP_HEADERS)
"""tbf shapes frame bytes; a link's figure is payload, so rates are raised by this."""
BURST_S = 0.002
"""Token-bucket depth in seconds of the link's rate. A message that finds the bucket full
sends this much at veth speed, faster than the link (so not deeper); a loaded host fires
tbf's timer late and a shallow bucket then loses rate (8 flows at 400 Mbit/s on a busy
2-core VM: 91% of the rate with 1 ms, 101% with 4 ms)."""
CONGESTION_CONTROL = "reno"
"""Every namespace's TCP congestion control, whatever the host's default (which a new
namespace inherits). A shared link must hand a finished flow's share to the others at
once, as a switch or NIC does. BBR paces each flow at the share it measured while the
link was shared and grows it back over many round trips: on the shared-NIC testbed under
the host's BBR, 6 channels' allgather ran the NIC at 6-9 of its 12.5 MB/s for its last
0.3 s and took 868-913 ms, trees 719-767 ms; under reno, which fills whatever the link
frees, 680-693 and 694-695 ms (the link's rate allows 671). Reno because every kernel has it and a
namespace may always choose it (cubic only where the host allows it)."""


class TestbedUnavailable(CCWeaveError):
    """This host cannot build an emulated network (not root, no iproute2, no netns)."""

    __test__ = False  # not a pytest class


def unavailable_reason() -> str | None:
    """Why this host cannot run a testbed, or ``None`` when it can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the netns testbed needs root (network namespaces, veth and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the netns testbed needs `{tool}` (Debian: apt-get install iproute2)"
    probe = f"{PREFIX}probe{os.getpid()}"
    with signals_deferred():  # an interrupt in between left the probe for good
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if made.returncode == 0:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip() or made.returncode}"
    return None


def host_networks() -> set[str]:
    """CIDRs of the root namespace's IPv4 addresses (to pick testbed subnets beside)."""
    shown = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True)
    try:
        interfaces = json.loads(shown.stdout or "[]")
    except json.JSONDecodeError:
        return set()
    return {f"{a['local']}/{a['prefixlen']}" for i in interfaces
            for a in i.get("addr_info", [])}


class Testbed:
    """A context manager that builds ``emulation`` on enter and removes it on exit.

    Parameters
    ----------
    emulation: what to build (:func:`ccweave.testbed.emulation.emulate`).
    control: also join every rank's namespace to an unshaped bridge in the root
        namespace (``10.<control_subnet>.0.0/16``), which ``mpirun``'s runtime needs to
        reach its ranks; data still takes the shaped links.
    max_namespaces: refuse (before building) a testbed of more namespaces than this.
    on_progress: hears ``(nodes set up, nodes)`` as the build goes.

    What it makes carries ccweave's marker and is noted in a record before it is made
    (:mod:`ccweave.testbed.records`); a guard process removes it if this process dies
    without closing it (:mod:`ccweave.testbed.guard`).
    """

    __test__ = False  # not a pytest class

    def __init__(self, emulation: Emulation, *, control: bool = False,
                 max_namespaces: int = DEFAULT_MAX_NAMESPACES,
                 on_progress: Progress | None = None) -> None:
        self.emulation = emulation
        self.control = control
        self.control_subnet: int | None = None
        self.max_namespaces = max_namespaces
        self.on_progress = on_progress
        self._made: list[str] = []
        self._bridge: str | None = None
        self._attached = False
        self._guard: Guard | None = None
        self._maker = records.Maker.this_process()

    @classmethod
    def attach(cls, emulation: Emulation, control_subnet: int | None = None) -> Testbed:
        """A testbed that is already up (``ccweave testbed up``): used, not built, and
        left standing on exit."""
        bed = cls(emulation, control=control_subnet is not None)
        bed.control_subnet = control_subnet
        bed._attached = True
        return bed

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.emulation.tag}br"

    @property
    def marker(self) -> str:
        """The alias on everything this testbed makes (:func:`records.marker`)."""
        return records.marker(self.emulation.tag, self._maker)

    def control_address(self, rank: int) -> str:
        assert self.control_subnet is not None
        return rank_address(self.control_subnet, rank)

    def command(self, rank: int, argv: list[str]) -> list[str]:
        """``argv`` run inside rank ``rank``'s namespace."""
        return ["ip", "netns", "exec", self.emulation.namespace(rank), *argv]

    def env(self, rank: int) -> dict[str, str]:
        """What a rank's process needs: gloo (and NCCL's socket transport) bind to one
        of its devices; the host routes pick the link to each peer."""
        device = self.emulation.data_device(rank)
        return {"GLOO_SOCKET_IFNAME": device, "NCCL_SOCKET_IFNAME": device}

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Testbed:
        if self._attached:
            return self
        reason = unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        count = len(self.emulation.namespaces)
        if count > self.max_namespaces:
            raise LimitError(
                f"the testbed of {self.emulation.topology.name!r} needs {count} namespaces, "
                f"over the limit of {self.max_namespaces} (its build grows with the square "
                "of its ranks, and each rank is a process); emulate a smaller machine, or "
                f"raise the limit with --max-namespaces {count}")
        records.check_state_dir()
        try:
            with signals_deferred():
                self._guard = Guard()
                self._made = list(self.emulation.namespaces)
                self._note()
                self._build()
        except BaseException:  # a failure, or an interrupt held during the build and
            self.close()       # delivered at its end (the test's SIGTERM once left 3)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _links(self) -> list[str]:
        """The devices this testbed makes in the root namespace."""
        if not self.control:
            return []
        emu = self.emulation
        return [self.bridge, *(f"{PREFIX}{emu.tag}c{rank}" for rank in emu.topology.ranks)]

    def _note(self, **standing: object) -> None:
        """Write this testbed's record (before the build: what it will make), and have
        the guard watch the same."""
        record = records.Record(tag=self.emulation.tag, maker=self._maker,
                                namespaces=tuple(self._made), links=tuple(self._links()),
                                subnet=self.emulation.subnet,
                                control_subnet=self.control_subnet,
                                max_rate=self.emulation.max_rate_mbit, **standing)
        records.write_record(record)
        if self._guard is not None:
            self._guard.watch("namespaces", record.namespaces)
            self._guard.watch("links", record.links)
            self._guard.watch("paths", [str(records.record_path(record.tag))])

    def leave_standing(self, spec: str, info: dict) -> None:
        """Keep this testbed after this process ends (``ccweave testbed up``): its record
        says so, with what ``testbed run SPEC`` needs, and the guard is dismissed."""
        self._note(standing=True, spec=spec, info=info)
        if self._guard is not None:
            self._guard.close()
            self._guard = None
        self._made = []
        self._bridge = None

    def close(self) -> None:
        """Delete every namespace (their veths go with them), the control bridge and the
        record; safe to call twice."""
        with signals_deferred():
            if self._made or self._bridge:
                delete(self._made, [self._bridge] if self._bridge else [])
                records.drop_record(self.emulation.tag)
                self._made.clear()
                self._bridge = None
            if self._guard is not None:
                self._guard.close()
                self._guard = None

    def _build(self) -> None:
        emu = self.emulation
        _batch(["ip", "-batch", "-"], [f"netns add {name}" for name in emu.namespaces])
        links = []
        for wire in emu.wires:
            a, b = wire.a, wire.b
            links.append(f"link add dev {a.device} netns {emu.namespace(a.node)} address "
                         f"{a.mac} mtu {MTU} type veth peer name {b.device} netns "
                         f"{emu.namespace(b.node)} address {b.mac} mtu {MTU}")
        _batch(["ip", "-batch", "-"], links)
        per_ns: dict[str, list[str]] = defaultdict(
            lambda: [f"link set lo alias {self.marker}", "link set lo up"])
        shaping: dict[str, list[str]] = defaultdict(list)
        for wire in emu.wires:
            for port in (wire.a, wire.b):
                ns = emu.namespace(port.node)
                per_ns[ns].append(f"link set {port.device} up")
                if isinstance(port.node, int):
                    per_ns[ns].append(f"addr add {emu.address(port.node)}/32 dev {port.device}")
                if port.rate_bps is not None:
                    shaping[ns].append(_tbf(port))
        tables: dict[tuple[str, str], int] = {}
        neighbours: set[tuple[str, str, str, str]] = set()
        for route in emu.routes:
            ns = emu.namespace(route.node)
            dst = emu.address(route.dst)
            src = f" src {emu.address(route.node)}" if isinstance(route.node, int) else ""
            if route.src is None:
                per_ns[ns].append(f"route replace {dst}/32 dev {route.device}{src}")
            else:
                table = tables.setdefault((ns, route.device), 100 + len(tables))
                per_ns[ns].append(f"route replace {dst}/32 dev {route.device}{src} "
                                  f"table {table}")
                per_ns[ns].append(f"rule add from {emu.address(route.src)}/32 to {dst}/32 "
                                  f"table {table}")
            neighbours.add((ns, dst, route.next_mac, route.device))
        for ns, lines in self._pin_lines(emu.pinned).items():
            per_ns[ns] += lines
        for ns, dst, mac, device in sorted(neighbours):
            per_ns[ns].append(f"neigh replace {dst} lladdr {mac} dev {device} nud permanent")
        if self.control:
            self._control(per_ns)
        nodes = emu.topology.nodes
        for done, node in enumerate(nodes):
            if self.on_progress is not None:
                self.on_progress(done, len(nodes))
            ns = emu.namespace(node)
            forward = "0" if isinstance(node, int) and node not in emu.relays else "1"
            _run(["ip", "netns", "exec", ns, "sh", "-c",
                  f"echo {forward} > /proc/sys/net/ipv4/ip_forward && "
                  f"echo {CONGESTION_CONTROL} > "
                  "/proc/sys/net/ipv4/tcp_congestion_control && "
                  "for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > $f; done"])
            _batch(["ip", "-n", ns, "-batch", "-"], per_ns[ns])
            if shaping[ns]:
                _batch(["tc", "-n", ns, "-batch", "-"], shaping[ns])
        if self.on_progress is not None:
            self.on_progress(len(nodes), len(nodes))

    def pin(self, routes) -> None:
        """Make pinned routes ``(src, dst, via)`` real on the standing testbed (those it
        has keep their addresses); see :func:`~ccweave.testbed.emulation.emulate`."""
        from ccweave.testbed.emulation import emulate

        emu = self.emulation
        known = [(r.src, r.dst, r.via) for r in emu.pinned]
        wanted = [*known, *((s, d, tuple(v)) for s, d, v in routes)]
        grown = emulate(emu.topology, max_rate_mbit=emu.max_rate_mbit, tag=emu.tag,
                        subnet=emu.subnet, pinned=wanted)
        fresh = grown.pinned[len(known):]
        self.emulation = grown
        for ns, lines in self._pin_lines(fresh).items():
            _batch(["ip", "-n", ns, "-batch", "-"], lines)

    def _pin_lines(self, pinned) -> dict[str, list[str]]:
        """``ip`` lines per namespace: each route's two addresses, its hops and static
        neighbours. A route's addresses sit on the rank's loopback, not on a link's
        device: Open MPI's ``btl_tcp_if_include`` names a device, and would offer every
        address on it to its peers (which reach a pinned address only from its route's
        other end)."""
        emu = self.emulation
        per_ns: dict[str, list[str]] = defaultdict(list)
        for route in pinned:
            ends = {route.src: route.src_address, route.dst: route.dst_address}
            for rank, address in ends.items():
                per_ns[emu.namespace(rank)].append(f"addr add {address}/32 dev lo")
            for hop in (*route.hops, *route.back):
                ns = emu.namespace(hop.node)
                source = f" src {ends[hop.node]}" if hop.node in ends else ""
                per_ns[ns] += [f"route replace {hop.address}/32 dev {hop.device}{source}",
                               f"neigh replace {hop.address} lladdr {hop.next_mac} dev "
                               f"{hop.device} nud permanent"]
        return per_ns

    def routes_file(self, folder) -> str:
        """Write the pinned routes' addresses where ranks' transports read them
        (``CCWEAVE_ROUTES``); returns the path."""
        path = Path(folder) / "routes.json"
        path.write_text(json.dumps([r.to_dict() for r in self.emulation.pinned]))
        return str(path)

    def _control(self, per_ns: dict[str, list[str]]) -> None:
        emu = self.emulation
        used = host_networks() | {f"10.{emu.subnet}.0.0/16"}
        self.control_subnet = free_subnet(used)
        self._bridge = self.bridge
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "link", "set", self.bridge, "alias", self.marker])
        _run(["ip", "addr", "add", f"10.{self.control_subnet}.255.254/16", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        lines = []
        for rank in emu.topology.ranks:
            outside = f"{PREFIX}{emu.tag}c{rank}"
            lines += [f"link add dev {outside} type veth peer name ctl netns "
                      f"{emu.namespace(rank)}",
                      f"link set {outside} alias {self.marker}",
                      f"link set {outside} master {self.bridge}", f"link set {outside} up"]
            per_ns[emu.namespace(rank)] += [
                f"addr add {self.control_address(rank)}/16 dev ctl", "link set ctl up"]
        _batch(["ip", "-batch", "-"], lines)


def _tbf(port: Port) -> str:
    """A token bucket at the port's payload rate (frames counted: see WIRE_PER_PAYLOAD);
    a burst of :data:`BURST_S` of traffic, at least two frames; the port's queue depth."""
    assert port.rate_bps is not None
    wire = port.rate_bps * WIRE_PER_PAYLOAD
    burst = max(int(wire * BURST_S), 2 * (MTU + _ETHERNET_HEADER))
    return (f"qdisc add dev {port.device} root tbf rate {int(wire * 8)}bit burst {burst} "
            f"latency {round(port.queue_s * 1000)}ms")


def fresh_tag() -> str:
    """Four characters no standing testbed and no record uses (namespace names start
    ``ccw<tag>``)."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    spaces, devices = records.host_names(PREFIX)
    taken = [*spaces, *devices]
    recorded, _ = records.read_records()
    seed = os.getpid() * 7919 + len(taken)
    for step in range(36**4):
        value = (seed + step * 104729) % 36**4
        tag = "".join(alphabet[value // 36**k % 36] for k in range(4))
        if not any(name.startswith(PREFIX + tag) for name in taken) and \
                not any(record.tag == tag for record in recorded):
            return tag
    raise TestbedUnavailable("no free testbed tag; run `ccweave testbed down`")


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while namespaces are made or removed, so an
    interrupt never leaves half a testbed; they are delivered (as usual) right after. A
    signal ignored (``nohup``) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
           if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for sig in caught:  # to this thread, handled before raise_signal returns
            signal.raise_signal(sig)


def _batch(command: list[str], lines: list[str], check: bool = True) -> None:
    if not lines:
        return
    done = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True,
                          text=True)
    if check and done.returncode != 0:
        detail = done.stderr.strip().splitlines()[:3] or [f"exit code {done.returncode}"]
        raise TestbedUnavailable(f"`{' '.join(command)}` failed: {' / '.join(detail)}")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        detail = done.stderr.strip() or f"exit code {done.returncode}"
        raise TestbedUnavailable(f"`{' '.join(command)}` failed: {detail}")
