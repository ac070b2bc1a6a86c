"""The tuner file, proven by NCCL's own code: the example plugin (NVIDIA/nccl
plugins/tuner/example, unchanged in ../shared/fixtures/nccl-tuner) is built with gcc,
loaded, fed the file ccweave writes, and asked at every rule and both sides of every
boundary what NCCL would run; it must be what ccweave's model chooses."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.nccl import constants as C
from ccweave.nccl import plugin, tuner
from ccweave.nccl.fit import fit
from ccweave.nccl.measured import read
from ccweave.nccl.model import IGNORE, TuningModel, nccl_model, pick
from ccweave.topology import zoo

FIXTURE = Path(__file__).parents[2] / "shared" / "fixtures" / "nccl-tuner"
MACHINES = ("dgx-a100", "dgx-h100", "dgx-a100:2", "ndv2:2", "mist", "dgx-h100:4")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build NCCL's example tuner plugin")
    if not (FIXTURE / "plugin.c").is_file():
        pytest.skip(f"{FIXTURE} is missing: NCCL's example tuner plugin is not at hand")
    return plugin.build(FIXTURE, tmp_path_factory.mktemp("plugin"))


def boundary_sizes(rules: list[tuner.Rule]) -> list[tuple[str, int]]:
    """Each rule's first and last size and the sizes just outside it."""
    sizes = set()
    for rule in rules:
        for size in (rule.min_bytes - 1, rule.min_bytes, rule.max_bytes,
                     rule.max_bytes + 1):
            if 0 <= size <= tuner.MAX_BYTES:
                sizes.add((rule.collective, size))
    return sorted(sizes)


def disagreements(library: Path, model: TuningModel, rules: list[tuner.Rule],
                  config: Path) -> tuple[int, list[str]]:
    """Ask the plugin at every boundary; what it makes NCCL run against ccweave's choice."""
    tuner.write(config, rules, ["test"])
    system = model.system
    asked, wrong = 0, []
    with plugin.ExampleTuner(library, config, system.ranks, system.nodes) as example:
        for name, size in boundary_sizes(rules):
            table = model.cost_table(C.FUNCTIONS.index(name), size)
            marked, channels = example.coll_info(name, size, table)
            algo, proto, _ = pick(marked)
            want = model.choose(name, size)
            got = (C.ALGORITHMS[algo], C.PROTOCOLS[proto], channels)
            asked += 1
            if got != (want.algorithm, want.protocol, want.channels):
                wrong.append(f"{name} {size}: plugin {got}, ccweave {want.label}")
    return asked, wrong


@pytest.mark.parametrize("machine", MACHINES)
def test_the_plugin_chooses_what_ccweave_says_at_every_boundary(library, tmp_path, machine):
    model = nccl_model(zoo.get(machine))
    rules = tuner.rules(model)
    asked, wrong = disagreements(library, model, rules, tmp_path / "nccl_tuner.conf")
    assert asked >= 2 * len(rules) and not wrong, wrong[:5]


def test_a_file_fitted_to_the_fixture_s_measurements_also_agrees(library, tmp_path):
    measurements = read(FIXTURE / "scripts" / "sample_performance_data.csv")
    fitted = fit(nccl_model(zoo.get("dgx-h100")), measurements)
    rules = tuner.rules(fitted.model, ["allreduce", "broadcast"])
    asked, wrong = disagreements(library, fitted.model, rules, tmp_path / "fitted.conf")
    assert asked > 10 and not wrong, wrong[:5]


def test_where_no_rule_matches_the_plugin_leaves_nccl_one_channel(library, tmp_path):
    """Why every rule names its channels and the rules cover every size: plugin.c sets
    one channel before it looks for a rule."""
    model = nccl_model(zoo.get("dgx-a100"))
    config = tmp_path / "partial.conf"
    tuner.write(config, [tuner.Rule("allreduce", 0, 1023, "ring", "ll", -1, 1, 8)])
    table = model.cost_table(C.FUNCTIONS.index("allreduce"), 2**20)
    with plugin.ExampleTuner(library, config, 8, 1) as example:
        marked, channels = example.coll_info("allreduce", 2**20, table)
        flat = [cost for row in table for cost in row]
        assert [c for row in marked for c in row] == pytest.approx(flat, rel=1e-6)
        assert channels == 1  # no rule matched: the table is NCCL's, on one channel
        marked, channels = example.coll_info("allreduce", 512, table)
        assert channels == 1 and marked[C.RING][C.LL] == 0.0  # "-1": still one channel


def test_rules_cover_every_size_once_and_match_the_choice():
    model = nccl_model(zoo.get("dgx-a100:2"))
    rules = tuner.rules(model)
    for name in C.FUNCTIONS:
        mine = [r for r in rules if r.collective == name]
        assert mine[0].min_bytes == 0 and mine[-1].max_bytes == tuner.MAX_BYTES
        assert all(a.max_bytes + 1 == b.min_bytes for a, b in itertools.pairwise(mine))
        assert all(r.channels >= 1 and r.nodes == 2 and r.ranks == 16 for r in mine)
    text = tuner.render(rules, ["a comment\nspread over lines"])
    lines = text.splitlines()
    assert all(len(line) < 256 for line in lines)  # plugin.c reads lines of 256 bytes
    assert sum(1 for line in lines if not line.startswith("#")) == len(rules)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(C.FUNCTIONS), st.integers(0, 2**36))
def test_the_rule_a_size_falls_in_is_the_model_s_choice(name, size):
    model = _MODEL
    rule = tuner.lookup(_RULES, name, size)
    choice = model.choose(name, size)
    assert rule is not None
    assert (rule.algorithm, rule.protocol, rule.channels) == (
        choice.algorithm, choice.protocol, choice.channels)


_MODEL = nccl_model(zoo.get("dgx-h100:4"))
_RULES = tuner.rules(_MODEL)


def test_ignore_is_nccl_s_marker():
    assert IGNORE == -1.0  # NCCL_ALGO_PROTO_IGNORE in nccl/tuner.h
