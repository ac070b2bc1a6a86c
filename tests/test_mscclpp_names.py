"""Every name an exported MSCCL++ plan holds (keys, operation names, buffer and channel
types) is one MSCCL++'s own loader reads: found, quoted, in ``execution_plan.cc``."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from ccweave.export import mscclpp
from ccweave.export.mscclpp_write import ExportOptions
from ccweave.synth import synthesize
from ccweave.topology import zoo

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "mscclpp"
LOADER = FIXTURES / "reference-parser" / "execution_plan.cc"
needs_loader = pytest.mark.skipif(not LOADER.is_file(), reason=f"{LOADER} is missing (the "
                                  "MSCCL++ fixtures live in ../shared)")
ENUM_KEYS = {"name", "channel_type", "access_channel_type", "type", "buffer_type", "buff"}


def _names(value, top: bool = True, found: set[str] | None = None) -> set[str]:
    """Keys, and the values of enum-valued keys (a plan's own name excluded)."""
    found = set() if found is None else found
    if isinstance(value, dict):
        for key, item in value.items():
            found.add(key)
            if key in ENUM_KEYS and isinstance(item, str) and not (top and key == "name"):
                found.add(item)
            if key == "access_channel_types":
                found.update(item)
            _names(item, False, found)
    elif isinstance(value, list):
        for item in value:
            _names(item, False, found)
    return found


@cache
def _exports() -> list[dict]:
    """Plans that use every operation ccweave writes: Simple and LL, memory channels and
    port channels (another node, and host-staged pairs of one node), reductions too."""
    plans = []
    for machine, kind, strategy, protocol in (
            ("ndv2:2", "allreduce", "ring", "Simple"), ("ndv2:2", "allreduce", "ring", "LL"),
            ("dgx1", "allgather", "ring", "Simple"), ("switch:4", "alltoall", "ring", "LL"),
            ("switch:4", "reducescatter", "ring", "Simple")):
        topo = zoo.get(machine)
        sched = synthesize(topo, kind, strategy)
        plans.append(mscclpp.to_plan(sched, topo, ExportOptions(protocol=protocol)))
    return plans


@needs_loader
def test_every_emitted_name_is_read_by_the_loader():
    loader = LOADER.read_text()
    names = set().union(*(_names(plan) for plan in _exports()))
    ops = {"put", "pwsf", "rre", "re", "copy", "ppkt", "upkt", "repkt", "cpkt", "rppkt",
           "signal", "wait", "rlxsignal", "rlxwait", "nop", "barrier", "sem_acquire",
           "sem_release"}
    assert ops <= names  # the exports above do reach every operation ccweave writes
    missing = sorted(n for n in names - {"Simple", "LL"} if f'"{n}"' not in loader)
    assert not missing, f"names the loader never reads: {missing}"
    assert '"LL"' in loader  # the loader's one protocol test; anything else is Simple


@needs_loader
def test_the_dsl_keys_the_loader_ignores_are_not_written():
    """MSCCL++'s DSL writes ``reduce_op``; the loader never reads it (the executor always
    sums), so a plan that says another reduction would lie."""
    loader = LOADER.read_text()
    assert '"reduce_op"' not in loader
    assert all("reduce_op" not in _names(plan) for plan in _exports())


@needs_loader
def test_simple_is_the_dsl_spelling():
    """The loader tests only ``protocol == "LL"``; ``Simple`` is how MSCCL++'s docs and DSL
    spell the other one."""
    assert 'protocol="Simple"' in (FIXTURES / "docs" / "quick_start.md").read_text()
