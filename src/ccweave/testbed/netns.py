"""An emulated network on one Linux host: network namespaces joined by veth pairs shaped
with ``tc`` (token-bucket rate; ``netem`` delay where the kernel has it). Needs root and
iproute2.

Two hosts are joined by one veth pair; three or more hang off a Linux bridge in a switch
namespace, each through its own shaped veth (its *uplink*). Every host sees one
interface, :data:`INTERFACE`, with address ``10.N.0.(i+1)/24``, so a process started with
:meth:`Testbed.command` binds gloo to it with ``GLOO_SOCKET_IFNAME``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from ccweave.errors import CCWeaveError, InputError

INTERFACE = "ccw0"
_counter = itertools.count()


class TestbedUnavailable(CCWeaveError):
    """This host cannot build an emulated network (not root, no iproute2, no netns)."""

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class Uplink:
    """One host's link: ``rate_mbit`` megabits/second each way, ``delay_ms`` one way."""

    rate_mbit: float
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.rate_mbit > 0 or self.delay_ms < 0:
            raise InputError(f"uplink rate {self.rate_mbit} Mbit/s, delay {self.delay_ms} "
                             "ms: need a positive rate and a delay >= 0")

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.rate_mbit * 1e6 / 8


def unavailable_reason() -> str | None:
    """Why this host cannot run a testbed, or ``None`` when it can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the netns testbed needs root (network namespaces, veth and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the netns testbed needs `{tool}` (Debian: apt-get install iproute2)"
    probe = f"ccwprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip() or made.returncode}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Testbed:
    """A context manager: ``with Testbed([Uplink(800), Uplink(800)]) as bed: ...``.

    Parameters
    ----------
    uplinks: one per host; two hosts are joined directly (the pair's rate is the slower
        uplink's), more through a bridge.
    subnet: the second octet of the hosts' ``10.x.0.0/24`` network (default: unique).
    burst_kb: the token bucket's burst. A message that finds the bucket full sends its
        first ``burst_kb`` at veth speed, so ping-pong times are ``(size - burst)/rate``
        (a negative fitted alpha); a smaller burst misses the rate on a loaded host,
        whose timers fire late (32 KB gave 67% of 800 Mbit/s on a busy 2-core VM, 128 KB
        94%, the TCP/IP header overhead).
    """

    __test__ = False  # not a pytest class

    def __init__(self, uplinks: Sequence[Uplink], *, subnet: int | None = None,
                 burst_kb: int = 128) -> None:
        if len(uplinks) < 2:
            raise InputError("a testbed needs at least two hosts")
        if len(uplinks) > 250:
            raise InputError("a testbed holds at most 250 hosts")
        self.uplinks = tuple(uplinks)
        tag = f"{os.getpid() % 100000}{next(_counter)}"
        self.tag = tag
        self.namespaces = tuple(f"ccw{tag}h{i}" for i in range(len(uplinks)))
        self.switch = f"ccw{tag}sw" if len(uplinks) > 2 else None
        self.subnet = subnet if subnet is not None else 100 + (os.getpid() + int(tag)) % 150
        self.burst_kb = burst_kb
        self._made: list[str] = []

    # ------------------------------------------------------------------ addresses

    def address(self, host: int) -> str:
        """The host's IPv4 address on the emulated network."""
        return f"10.{self.subnet}.0.{host + 1}"

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the host's namespace."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def env(self, host: int) -> dict[str, str]:
        """Environment for a process on ``host``: gloo binds to the emulated interface."""
        return {"GLOO_SOCKET_IFNAME": INTERFACE, "NCCL_SOCKET_IFNAME": INTERFACE}

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Testbed:
        reason = unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete every namespace made (their veths go with them); safe to call twice."""
        while self._made:
            subprocess.run(["ip", "netns", "del", self._made.pop()], capture_output=True)

    def _build(self) -> None:
        for name in (*self.namespaces, *([self.switch] if self.switch else [])):
            _ip("netns", "add", name)
            self._made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        if self.switch is None:
            self._veth(0, self.namespaces[1], INTERFACE, self.uplinks[1])
        else:
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for host in range(len(self.uplinks)):
                self._veth(host, self.switch, f"p{host}", self.uplinks[host], bridge="br0")
        for host, name in enumerate(self.namespaces):
            _ip("-n", name, "addr", "add", f"{self.address(host)}/24", "dev", INTERFACE)
            _ip("-n", name, "link", "set", INTERFACE, "up")

    def _veth(self, host: int, far_ns: str, far_name: str, far_uplink: Uplink,
              bridge: str | None = None) -> None:
        """A veth from ``host`` (as INTERFACE) to ``far_ns`` (as ``far_name``), both ends
        shaped: the host's end by its uplink, the far end by ``far_uplink``."""
        a, b = f"ccw{self.tag}a", f"ccw{self.tag}b"
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        try:
            _ip("link", "set", a, "netns", self.namespaces[host])
            _ip("link", "set", b, "netns", far_ns)
        except TestbedUnavailable:
            subprocess.run(["ip", "link", "del", a], capture_output=True)
            raise
        _ip("-n", self.namespaces[host], "link", "set", a, "name", INTERFACE)
        _ip("-n", far_ns, "link", "set", b, "name", far_name)
        if bridge:
            _ip("-n", far_ns, "link", "set", far_name, "master", bridge)
        _ip("-n", far_ns, "link", "set", far_name, "up")
        self._shape(self.namespaces[host], INTERFACE, self.uplinks[host])
        self._shape(far_ns, far_name, far_uplink if bridge is None else self.uplinks[host])

    def _shape(self, namespace: str, device: str, uplink: Uplink) -> None:
        """Egress of ``device``: a token bucket at the uplink's rate, after netem's delay."""
        rate = f"{uplink.rate_mbit:g}mbit"
        tbf = ["tbf", "rate", rate, "burst", f"{self.burst_kb}kb", "latency", "100ms"]
        if uplink.delay_ms > 0:
            _tc(namespace, "qdisc", "add", "dev", device, "root", "handle", "1:", "netem",
                "delay", f"{uplink.delay_ms:g}ms", "limit", "100000")
            _tc(namespace, "qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:",
                *tbf)
        else:
            _tc(namespace, "qdisc", "add", "dev", device, "root", *tbf)


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _tc(namespace: str, *args: str) -> None:
    _run(["tc", "-n", namespace, *args])


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        detail = done.stderr.strip() or f"exit code {done.returncode}"
        hint = ""
        if "netem" in command and "unknown" in detail.lower():
            hint = "; this kernel has no netem, so the testbed cannot add delay (use 0)"
        raise TestbedUnavailable(f"`{' '.join(command)}` failed: {detail}{hint}")
