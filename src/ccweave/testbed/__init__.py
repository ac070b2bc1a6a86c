"""Any Topology emulated on one Linux host with network namespaces, veth pairs and
``tc``: real processes, real TCP, the model's links and routes (needs root)."""

from ccweave.testbed.cleanup import Clearance, clear_testbeds
from ccweave.testbed.emulation import Emulation, emulate
from ccweave.testbed.launch import run_mpi, run_ranks
from ccweave.testbed.netns import Testbed, TestbedUnavailable, unavailable_reason

__all__ = ["Clearance", "Emulation", "Testbed", "TestbedUnavailable", "clear_testbeds", "emulate",
           "run_mpi", "run_ranks", "unavailable_reason"]
