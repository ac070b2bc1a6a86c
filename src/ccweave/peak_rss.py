"""This process's own peak resident memory, as the benchmarks and the runtime report it."""

from __future__ import annotations

import resource
import sys


def peak_rss_bytes() -> int:
    """The most resident memory this program has held: Linux's ``VmHWM``, which starts
    afresh at ``exec``. ``ru_maxrss`` does not: Linux carries it over from the parent
    across fork and exec, so a process started by a 1 GiB parent reports at least 1 GiB
    (a benchmark's children, or ranks a launcher forked after synthesizing). Elsewhere,
    ``ru_maxrss`` (bytes on macOS, KiB on Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


__all__ = ["peak_rss_bytes"]
