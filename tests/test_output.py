"""The CLI's figures show their values: every digit printed is the value's, correctly
rounded, a value that is not zero never prints as zero, and no figure outgrows a table
cell (``topo show`` printed 0.0375 GB/s as 0.0370 and 1e300 as 301 digits)."""

from __future__ import annotations

import contextlib
import io
import json
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.cli import main
from ccweave.commands._output import fmt
from ccweave.topology import io as topology_io
from ccweave.topology.plausible import MAX_ALPHA_US, PLAUSIBLE_GBPS
from ccweave.units import GB_PER_S, US


def shows(text: str, value: float) -> None:
    """``text`` parses back to ``value`` within half a unit of its last digit, keeps at
    least three significant digits of a value that is not zero, and never shows it as
    zero."""
    shown = Decimal(text)
    last_digit = Decimal(1).scaleb(shown.as_tuple().exponent)
    assert abs(shown - Decimal(value)) <= last_digit / 2, (value, text)
    if value != 0:
        assert shown != 0 and (shown > 0) == (value > 0), (value, text)
        assert shown.adjusted() - shown.as_tuple().exponent + 1 >= 3, (value, text)


@settings(max_examples=400, deadline=None)
@given(value=st.floats(allow_nan=False, allow_infinity=False))
def test_a_figure_shows_its_value(value):
    text = fmt(value)
    shows(text, value)
    assert len(text) <= 13, text  # a table cell, not 301 digits


def test_figures_people_read():
    assert [fmt(v) for v in (0.0375, 0.0125, 0.01875, 0.7, 25.0, 1234.567, 0.0)] == \
        ["0.0375", "0.0125", "0.01875", "0.700", "25.00", "1234.57", "0.00"]
    assert fmt(1e300) == "1.00e+300" and fmt(3e-7) == "3.00e-07"
    assert fmt(float("inf")) == "inf" and fmt(3) == "3"


def _topo_show(path: str, *flags: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["topo", "show", path, *flags]) == 0
    return out.getvalue()


def _figures(text: str) -> list[list[str]]:
    """The cells of every table row."""
    return [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in text.splitlines() if line.startswith("│")]


def _ring(bandwidths: list[float], alphas: list[float]) -> dict[str, object]:
    n = len(bandwidths)
    return {"name": "figures", "ranks": n, "links": [
        {"src": i, "dst": (i + 1) % n, "bw_GBps": bw, "alpha_us": alpha, "duplex": True}
        for i, (bw, alpha) in enumerate(zip(bandwidths, alphas))]}


def test_topo_show_prints_the_issue_bandwidths(tmp_path):
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(_ring([0.0375, 0.0125, 0.01875], [0.7, 0.7, 0.7])))
    for flags in ((), ("--links",)):
        column = {row[-2] for row in _figures(_topo_show(str(path), *flags))}
        assert column == {"0.0375", "0.0125", "0.01875"}, column


@settings(max_examples=25, deadline=None)
@given(figures=st.lists(
    st.tuples(st.floats(*PLAUSIBLE_GBPS), st.one_of(st.just(0.0), st.floats(0, MAX_ALPHA_US))),
    min_size=3, max_size=4))
def test_topo_show_prints_every_link_as_its_value(tmp_path_factory, figures):
    """Each link class and each link (``--links``) prints its bandwidth and latency as
    ccweave holds them: a class holds only links whose figures print the same."""
    path = tmp_path_factory.mktemp("topo") / "t.json"
    bandwidths, alphas = [bw for bw, _ in figures], [alpha for _, alpha in figures]
    path.write_text(json.dumps(_ring(bandwidths, alphas)))
    held = {(lk.bandwidth / GB_PER_S, lk.alpha / US) for lk in topology_io.load(path).links}
    for flags in ((), ("--links",)):
        rows = _figures(_topo_show(str(path), *flags))
        links = len(rows) if flags else sum(int(row[1]) for row in rows)
        assert links == 2 * len(figures)
        printed = {(row[-2], row[-1]) for row in rows}
        for bw, alpha in held:  # (an alpha of 5e-324 us is 0 s: the file's figure is gone)
            match = [p for p in printed if _near(p[0], bw) and _near(p[1], alpha)]
            assert match, (bw, alpha, printed)


def _near(text: str, value: float) -> bool:
    try:
        shows(text, value)
    except AssertionError:
        return False
    return True

