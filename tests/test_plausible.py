"""Implausible link figures are refused at the readers with one line naming the file, the
link and the fix; whatever passes (and whatever a program builds) computes without an
overflow: ``compare`` on a link of 1e-300 GB/s was an OverflowError traceback from the
trees' integer capacities."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace

import pytest

from ccweave.cli import main
from ccweave.simulate import simulate
from ccweave.synth import synthesize
from ccweave.topology import io as topology_io
from ccweave.topology import zoo
from ccweave.topology.plausible import MAX_ALPHA_US, PLAUSIBLE_GBPS
from ccweave.verify import verify


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _switch4(**edits: object) -> dict[str, object]:
    data = topology_io.to_dict(zoo.get("switch:4"))
    for key, value in edits.items():
        if key.startswith("link0_"):
            data["links"][0][key[6:]] = value
        elif key.startswith("link1_"):
            data["links"][1][key[6:]] = value
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(("edits", "named"), [
    ({"link0_bw_GBps": 1e-300}, "links[0]: field 'bw_GBps' is 1e-300 GB/s, outside"),
    ({"link0_bw_GBps": 1e300}, "links[0]: field 'bw_GBps' is 1e+300 GB/s"),
    ({"link0_bw_GBps": 1e5, "link0_count": 100}, "links[0]: bw_GBps x count is 1e+07 GB/s"),
    ({"link0_alpha_us": 1e300}, "links[0]: field 'alpha_us' is 1e+300 us, over"),
    ({"local_bw_GBps": 1e-9}, "field 'local_bw_GBps' is 1e-09 GB/s"),
    ({"cost_model": {"host_GBps": 1e-300}}, "cost_model.host_GBps is 1e-300 GB/s"),
    ({"cost_model": {"message_latency_us": 1e12}}, "cost_model.message_latency_us is 1e+12"),
])
def test_implausible_figures_are_refused_naming_the_file_and_field(tmp_path, edits, named):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(_switch4(**edits)))
    code, _, err = _cli("compare", str(path), "allgather", "--sizes", "1MB")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{path}: {named}" in err and ("give GB/s" in err or "give microseconds" in err)


def test_the_edges_of_the_range_compare_and_print_times(tmp_path):
    """The slowest and fastest links a file may hold, side by side (1e12 apart), and the
    longest latency: every strategy prints a time."""
    low, high = PLAUSIBLE_GBPS
    path = tmp_path / "edges.json"
    path.write_text(json.dumps(_switch4(link0_bw_GBps=low, link1_bw_GBps=high,
                                        link1_alpha_us=MAX_ALPHA_US)))
    code, out, err = _cli("compare", str(path), "allgather", "--sizes", "1KB,1GB",
                          "--strategies", "trees,ring", "--json")
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert len(rows) == 4 and all(row["time_s"] > 0 for row in rows)


@pytest.mark.parametrize("strategy", ["trees", "ring"])
def test_a_program_built_topology_of_any_finite_bandwidth_computes(strategy):
    """The library takes what a program builds (no reader in between): a link 1e300 times
    slower than the others is a slow link, not an OverflowError."""
    topo = zoo.get("switch:4")
    links = list(topo.links)
    links[0] = replace(links[0], bandwidth=1e-300 * 1e9)
    slow = replace(topo, links=tuple(links))
    schedule = synthesize(slow, "allgather", strategy)
    verify(schedule, slow)
    assert 1e280 < simulate(schedule, slow, 2**20).time_s < float("inf")
