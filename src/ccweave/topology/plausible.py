"""The figures a real link can have: readers refuse a bandwidth or latency outside them.

A topology file, a cost model or a TACCL profile that says 1e-300 GB/s or 1e300 us holds
a typo or a unit slip, not a machine; refused at the reader with the file, the field and
the fix, before the maths meets it (1e-300 GB/s overflowed the trees' integer capacities
and printed times of 300 digits). Figures built in code are not checked here: the
library copes with whatever is finite and positive.
"""

from __future__ import annotations

from ccweave.errors import TopologyError

PLAUSIBLE_GBPS = (1e-6, 1e6)
"""Bandwidths a file may give, in GB/s (1 GB = 1e9 bytes): 1 kB/s to 1 PB/s, a range no
real link leaves (a 56k modem moves 7e-6 GB/s, an NVLink 5 port 900)."""

MAX_ALPHA_US = 1e7
"""The longest latency a file may give, in microseconds: 10 s (a geostationary satellite
hop takes 0.25 s)."""


def check_bandwidth(what: str, gbps: float) -> None:
    """Refuse a bandwidth (GB/s) outside :data:`PLAUSIBLE_GBPS`; ``what`` names the file
    and the field."""
    low, high = PLAUSIBLE_GBPS
    if not low <= gbps <= high:
        raise TopologyError(f"{what} is {gbps:.6g} GB/s, outside the {low:g}..{high:g} GB/s "
                            "every real link lies in; give GB/s (1 GB = 1e9 bytes), e.g. 25 "
                            "for an NVLink 2 port")


def check_latency(what: str, us: float) -> None:
    """Refuse a latency (microseconds) over :data:`MAX_ALPHA_US`; ``what`` names the file
    and the field."""
    if us > MAX_ALPHA_US:
        raise TopologyError(f"{what} is {us:.6g} us, over the {MAX_ALPHA_US:g} us (10 s) no "
                            "real link takes; give microseconds, e.g. 0.7 for an NVLink hop")
