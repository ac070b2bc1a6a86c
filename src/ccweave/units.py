"""Units: the library works in bytes, seconds and bytes/second; files and the CLI in
``alpha_us``, ``bw_GBps`` (GB = 1e9 bytes) and sizes like ``64MB`` (MB = 2**20 bytes,
as nccl-tests prints).
"""

from __future__ import annotations

import math
import re
import reprlib
from fractions import Fraction

from ccweave import limits
from ccweave.errors import InputError, LimitError

GB_PER_S = 1e9
US = 1e-6

_SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20,
               "MIB": 2**20, "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_FACTOR_RE = re.compile(r"^\s*\d{1,30}(?:\.\d{1,30})?\s*$")


def parse_size(text: str) -> int:
    """Parse ``"64MB"``, ``"1G"``, ``"4096"`` into bytes (binary multiples, as nccl-tests)."""
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).upper() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise InputError(f"size {shown(text)}: expected a number with an optional unit "
                         "B, KB, MB, GB or TB (binary multiples), e.g. 64MB")
    number = match.group(1)
    too_long = len(number.partition(".")[0].lstrip("0")) > 20  # over any limit: skip the maths
    size = 0 if too_long else int(Fraction(number[:60]) * _SIZE_UNITS[unit])  # exact
    if too_long or size > limits.MAX_SIZE_BYTES:
        raise LimitError(f"size {shown(text)}: over the limit of "
                         f"{format_size(limits.MAX_SIZE_BYTES)}; give a smaller size")
    return size


def parse_sizes(text: str) -> list[int]:
    """Parse ``"1MB,1GB"`` or a doubling range ``"1KB:1GB"`` (like nccl-tests ``-b -e -f 2``).

    At most :data:`ccweave.limits.MAX_SIZES` sizes; a longer list or range is refused
    before it is made, naming how many it would hold.
    """
    text = str(text).strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise InputError(f"sizes {shown(text)}: a range is MIN:MAX or MIN:MAX:FACTOR, "
                             "e.g. 1KB:1GB")
        low, high = parse_size(parts[0]), parse_size(parts[1])
        if len(parts) == 3 and not _FACTOR_RE.match(parts[2]):
            raise InputError(f"sizes {shown(text)}: FACTOR {parts[2]!r} must be a number above 1, "
                             "e.g. 1KB:1GB:2")
        factor = float(parts[2]) if len(parts) == 3 else 2.0
        if low <= 0 or high < low or factor <= 1:
            raise InputError(f"sizes {shown(text)}: need 0 < MIN <= MAX and FACTOR > 1")
        count = math.floor(math.log(high / low) / math.log(factor) + 1e-9) + 1
        limits.check(f"sizes {shown(text)}", count, limits.MAX_SIZES, "sizes",
                     "use a larger FACTOR or a narrower range")
        sizes, size = [], float(low)
        while size <= high * (1 + 1e-9):
            sizes.append(int(size))
            size *= factor
        return sizes
    parts = [part for part in text.split(",") if part.strip()]
    limits.check(f"sizes {shown(text)}", len(parts), limits.MAX_SIZES, "sizes",
                 "give fewer sizes")
    sizes = [parse_size(part) for part in parts]
    if not sizes or any(size <= 0 for size in sizes):
        raise InputError(f"sizes {shown(text)}: give positive sizes, e.g. 1MB,1GB or 1KB:1GB")
    return sizes


def format_size(num_bytes: float) -> str:
    """Format bytes the way the CLI accepts them back (``64MB``, ``1GB``, ``1536B``)."""
    for unit, factor in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if num_bytes >= factor and num_bytes % factor == 0:
            return f"{int(num_bytes // factor)}{unit}"
    if num_bytes >= 2**20:
        return f"{num_bytes / 2**20:.2f}MB"
    return f"{int(num_bytes)}B"


def human_size(num_bytes: float) -> str:
    """Bytes for people, rounded: ``21.3 GB``, ``1.0 TB`` (binary multiples)."""
    for unit, factor in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if num_bytes >= factor:
            return f"{num_bytes / factor:.1f} {unit}"
    return f"{int(num_bytes)} B"


def shown(value: object, width: int = 40) -> str:
    """``repr(value)``, cut to about ``width`` characters (a one-line error quotes it;
    a long list or a deeply nested value is abbreviated, never walked whole)."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = width
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 6
    short.maxlevel = 3
    quoted = short.repr(value)
    return quoted if len(quoted) <= width + 4 else quoted[:width] + "..."
