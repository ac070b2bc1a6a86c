"""Sizes as nccl-tests prints them."""

import pytest

from ccweave.errors import InputError
from ccweave.units import format_size, parse_size, parse_sizes


def test_parse_size_uses_binary_multiples():
    assert parse_size("64MB") == 64 * 2**20
    assert parse_size("1G") == 2**30
    assert parse_size("4096") == 4096
    assert parse_size("1.5KB") == 1536


def test_parse_sizes_range_doubles():
    assert parse_sizes("1KB:8KB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1MB,1GB") == [2**20, 2**30]
    assert parse_sizes("1KB:16KB:4") == [1024, 4096, 16384]


@pytest.mark.parametrize("bad", ["", "abc", "1XB", "8KB:1KB", "1KB:2KB:1"])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(InputError):
        parse_sizes(bad)


def test_format_size_reads_back():
    for size in (1, 1024, 64 * 2**20, 2**30):
        assert parse_size(format_size(size)) == size
