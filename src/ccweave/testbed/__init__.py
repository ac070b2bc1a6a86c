"""A machine emulated on one host with network namespaces, veth pairs and ``tc``, for
testing the profiler and runtimes against known link figures (needs root)."""

from ccweave.testbed.launch import run_ranks
from ccweave.testbed.netns import Testbed, TestbedUnavailable, Uplink, unavailable_reason

__all__ = ["Testbed", "TestbedUnavailable", "Uplink", "run_ranks", "unavailable_reason"]
