"""Fit the cost model (:mod:`ccweave.topology.cost`) to the running machine: run a few
real schedules that stress what the links alone do not explain — every rank sending to
every other at once (the hosts' CPUs), many small messages in a pipeline (each message's
cost) — and choose the per-message overhead and host bandwidth with which the simulator
predicts their measured times best (least squares on log time).

The schedules are ccweave's own strategies on the machine's topology, run by the same
executor ``ccweave run`` and ``ccweave bench`` use, so what is fitted is what they pay.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import scipy.optimize

from ccweave.collectives import Kind
from ccweave.compare import build_verified
from ccweave.errors import NotApplicableError, RuntimeFault
from ccweave.runtime.batch import Case
from ccweave.schedule import Schedule
from ccweave.simulate import simulate
from ccweave.topology.cost import CostModel
from ccweave.topology.model import Topology

OVERHEAD_PROBE_BYTES = 16 << 10
"""The size of the workload that shows each message's overhead: small enough that its
bytes take little time even on a slow shared link."""
WORKLOADS = ((Kind.ALLTOALL, "direct", {}, None),
             (Kind.ALLGATHER, "ring", {"chunks": 8}, None),
             (Kind.ALLREDUCE, "double-binary-tree", {"chunks": 16}, None),
             (Kind.ALLREDUCE, "ring", {"chunks": 16}, None),
             (Kind.ALLREDUCE, "ring", {"channels": 1, "chunks": 1}, None),
             (Kind.ALLGATHER, "trees", {"chunks": 16}, (OVERHEAD_PROBE_BYTES,)),
             (Kind.ALLREDUCE, "ring", {"channels": 1, "chunks": 1}, (OVERHEAD_PROBE_BYTES,)))
"""(collective, strategy, options, the workload's own sizes or ``None``: the calibration's.)
Every rank to every other at once (the hosts' CPUs); rings on every channel; two trees
pipelining 16 chunks each, long chains of dependent small messages (each message's
latency and overhead); one plain ring (what the links alone explain); and many messages
that every rank issues at once, whose bytes take no time: trees' allgather of 16 chunks a
root at :data:`OVERHEAD_PROBE_BYTES` (904 messages of 128 bytes on 8 ranks, a few trees'
levels deep), which only each message's overhead explains. In a long chain a latency stands in
for an overhead: behind a 100 Mbit/s NIC shared by 4 ranks
(examples/topologies/shared-nic-2x4.json) the fits without that workload found 75 us once,
22 us once, none twice, 0.68 us once (see :data:`PER_MESSAGE_RESOLUTION`) and 2.2 us with
218 us of latency, with which trees cut a 1 MB allreduce into 42 chunks a rank, 2.51x the
fastest schedule measured. (The ring allgather of 128 chunks a rank it replaces was meant
to be many messages; a ring sends each step's chunks as one message: 64 messages.) With
a ring at 64 KiB (64-byte messages, one chain) the fit put 2.5 ms on each message's
latency and 1.2 us on its overhead, predicting hierarchical 54% slow. Adding trees'
allreduce at 1 and 16 MB (every link of every rank busy at once) moved 0.4 ms onto
message latency and found no host term. Last, one chain of small messages, a plain ring's
allreduce at :data:`OVERHEAD_PROBE_BYTES` (14 dependent 2 KB messages on 8 ranks): with
the probe fixing the overhead, it fixes the latency. Without it nothing did: four fits on
the rail testbed (examples/topologies/rail-2x4.json) found 51, 970, 1618 and 2626 us, and
the last predicted 1 MB allreduces up to 75% slow; refitted with it, 429-581 us."""
TARGET_SECONDS = 0.5
"""Each repetition of a workload runs it as often as lasts about this long (at most
:data:`MAX_ITERS` times): run once, a 16 KB ring on the rail testbed took 11-21 ms,
twenty at a time 11.3-12.8 ms each."""
MAX_ITERS = 20
DEFAULT_SIZES = (1 << 20, 16 << 20)


@dataclass(frozen=True)
class Workload:
    """One calibration schedule at one size and the time it took."""

    schedule: Schedule
    size_bytes: int
    measured_s: float | None = None


def workloads(topology: Topology, sizes: Sequence[int] = DEFAULT_SIZES) -> list[Workload]:
    """The calibration schedules that build on ``topology``, at each size (or at their
    own)."""
    found = []
    for kind, strategy, options, own in WORKLOADS:
        try:
            schedule = build_verified(topology, kind, strategy, **options)
        except NotApplicableError:
            continue
        found += [Workload(schedule, size) for size in own or sizes]
    return found


ROUNDS = 3
"""Each workload is measured once per round, the rounds in alternating order, and its
time is the median of its rounds. Run as three back-to-back repetitions, a slow spell of
the host fell on whole workloads: the rail testbed's allgather calibration measured its
ring(4, 8) at 1 MB in 41.6 ms where the allreduce's, 15 minutes before, measured 30.9;
fitted on that, 1 MB schedules were predicted up to 41% slow. In rounds, the next run's
allgather calibration there fitted with a median error of 8% (16% before), and its 1 MB
allgathers were predicted within 19% (docs/testbed.md)."""


def first_round(loads: Sequence[Workload]) -> list[Case]:
    """The batch cases of the first round: each workload after one untimed run, as often
    as lasts about :data:`TARGET_SECONDS` (at most :data:`MAX_ITERS` times)."""
    return [Case(_case_name(number), load.schedule, (load.size_bytes,), modes=(False,),
                 iters=MAX_ITERS, warmup=1, target_s=TARGET_SECONDS)
            for number, load in enumerate(loads)]


def later_round(loads: Sequence[Workload], first_s: Sequence[float], number: int
                ) -> list[Case]:
    """Round ``number`` (1, 2, ...): every workload again, in reverse order every other
    round, with no untimed run and as many runs as the first round's time per run
    ``first_s`` says last :data:`TARGET_SECONDS` (the same on every rank, which all saw
    the same first round)."""
    order = range(len(loads) - 1, -1, -1) if number % 2 else range(len(loads))
    return [Case(_case_name(i), loads[i].schedule, (loads[i].size_bytes,), modes=(False,),
                 iters=_iterations(first_s[i]))
            for i in order]


def measure(loads: Sequence[Workload], run: Callable[[list[Case]], list[dict]],
            rounds: int = ROUNDS) -> list[float]:
    """Each workload's seconds per run: the median over ``rounds`` rounds that ``run``
    (every rank's :func:`ccweave.runtime.batch.run_cases`) measures."""
    times: list[list[float]] = [[] for _ in loads]

    def record(rows: list[dict]) -> None:
        for row in rows:
            result = row["out_of_place"]
            if result["wrong"]:
                raise RuntimeFault(f"calibration schedule {row['schedule']} at "
                                   f"{row['size_bytes']} bytes: {result['wrong']} wrong "
                                   "elements; the runtime is broken on this machine, so "
                                   "its times fit no model")
            times[_case_number(row["case"])].append(result["time_us"] * 1e-6)

    record(run(first_round(loads)))
    first_s = [rounds_s[0] for rounds_s in times]
    for number in range(1, max(1, rounds)):
        record(run(later_round(loads, first_s, number)))
    return [statistics.median(seconds) for seconds in times]


def _case_name(number: int) -> str:
    return f"calibrate-{number}"


def _case_number(name: str) -> int:
    return int(name.removeprefix("calibrate-"))


def _iterations(seconds: float) -> int:
    return max(1, min(MAX_ITERS, round(TARGET_SECONDS / seconds))) if seconds > 0 else MAX_ITERS


@dataclass(frozen=True)
class Calibration:
    """The fitted model and how well it explains each workload (predicted, measured)."""

    cost: CostModel
    hosts: tuple[tuple[int, ...], ...]
    fit: tuple[tuple[str, int, float, float], ...]
    """(schedule, size, predicted s, measured s) per workload."""

    @property
    def median_error(self) -> float:
        errors = sorted(abs(p - m) / m for _, _, p, m in self.fit)
        return errors[len(errors) // 2] if errors else 0.0


PER_MESSAGE_RESOLUTION = 1e-6
"""A fitted per-message term (overhead or latency) below this many seconds is none: the
workloads did not show it. A host-driven runtime spends more on every message (a system
call alone is about a microsecond; ccweave's executor on the rail testbed 55-69 us), and
where each calibration run waits on one slow link, as on the shared-NIC testbed, the fit
has stopped at 0.10001 us (its lower bound) and at 0.68 us; trees then cut a 16 MB
allreduce into 6 KB messages, 1.13x slower than hierarchical-pipelined. With no
per-message cost trees keeps 64 KiB messages."""


def per_message_term(log_seconds: float) -> float:
    """Seconds of a fitted per-message term from the solver's ``log`` value; 0.0 below
    :data:`PER_MESSAGE_RESOLUTION`."""
    seconds = math.exp(log_seconds)
    return seconds if seconds >= PER_MESSAGE_RESOLUTION else 0.0


def fit(topology: Topology, loads: Sequence[Workload], hosts: tuple[tuple[int, ...], ...],
        progress: Callable[[str], None] | None = None, starts: int = 2,
        cores: int | None = None) -> Calibration:
    """The link efficiency, host bandwidth, message latency and message overhead that best
    predict ``loads``' measured times on ``topology`` (least squares on log time), with
    connections carrying one message at a time as the runtime's do.

    A coarse grid of the four on log scales, then a fine one of latency and overhead,
    finds ``starts`` starting points; Nelder-Mead from each refines them (:func:`simplex`
    says why not least squares). Ranges:
    efficiency 0.3 .. 1; host bandwidth from the slowest link to 100x the fastest (beyond:
    unlimited); latency 0.1 us .. 100 ms and overhead 0.1 us .. 10 ms (at the low end:
    none). A host limit found is refitted away unless the times show it
    (:func:`term_is_shown`). ``cores``: CPUs per host (default: this process's, the hosts
    taken alike); where a host has more ranks than that, they share them to issue messages.
    """
    measured = [load for load in loads if load.measured_s]
    cores = cores or len(os.sched_getaffinity(0))
    shared = cores if any(len(group) > cores for group in hosts) else None
    top = max(link.bandwidth for link in topology.links)
    low = min(link.bandwidth for link in topology.links)
    source = "fitted by ccweave profile --calibrate"

    def residuals(cost: CostModel) -> list[float]:
        machine = topology.with_cost(cost, hosts)
        return [math.log(simulate(load.schedule, machine, load.size_bytes).time_s
                         / load.measured_s) for load in measured]

    def loss(cost: CostModel) -> float:
        return sum(r * r for r in residuals(cost))

    bounds = [(math.log(0.3), 0.0), (math.log(low), math.log(top * 1e3)),
              (math.log(1e-7), math.log(1e-1)), (math.log(1e-7), math.log(1e-2))]
    unlimited = math.log(top * 1e2)  # a host this fast never limits: no host term

    def model_of(x: Sequence[float]) -> CostModel:
        efficiency, host = math.exp(x[0]), math.exp(x[1])
        return CostModel(message_overhead=per_message_term(x[3]),
                         message_latency=per_message_term(x[2]),
                         host_bandwidth=host if x[1] < unlimited else None,
                         connection_fifo=True, link_efficiency=min(1.0, efficiency),
                         staging_latency=topology.cost.staging_latency, source=source,
                         host_cores=shared)

    # a coarse grid over the four (the terms trade off against each other: a greedy start
    # lets one absorb what another explains), then the per-message terms finely at its
    # best efficiency and host bandwidth (the loss between them has local minima);
    # Nelder-Mead refines the best ``starts`` points of both
    levels = [(0.0, math.log(0.85), math.log(0.6)),
              (bounds[1][1], math.log(low * 2), math.log(low * 8),
               math.log(math.sqrt(low * top) * 4)),
              (bounds[2][0], math.log(1e-5), math.log(1e-3)),
              (bounds[3][0], math.log(1e-5), math.log(3e-4))]
    grid = [(loss(model_of(point)), point) for point in itertools.product(*levels)]
    _, (efficiency, host, _, _) = min(grid)
    tried = {point for _, point in grid}  # both grids hold 1 ms with 10 and 300 us
    grid += [(loss(model_of(point)), point) for point in itertools.product(
        (efficiency,), (host,), map(math.log, LATENCY_LEVELS), map(math.log, OVERHEAD_LEVELS))
        if point not in tried]
    grid.sort()
    low_x, high_x = zip(*bounds)

    def refine(point: Sequence[float], fixed: dict[int, float] | None = None
               ) -> tuple[float, list[float]]:
        """Nelder-Mead from ``point`` over the parameters not ``fixed`` (index: value):
        the loss and the point found."""
        fixed = fixed or {}
        free = [i for i in range(len(point)) if i not in fixed]

        def full(v: Sequence[float]) -> list[float]:
            whole = [fixed.get(i, 0.0) for i in range(len(point))]
            for i, value in zip(free, v):
                whole[i] = float(value)
            return whole

        start = [min(max(point[i], low_x[i]), high_x[i]) for i in free]
        solved = scipy.optimize.minimize(
            lambda v: loss(model_of(full(v))), start, method="Nelder-Mead",
            bounds=[(low_x[i], high_x[i]) for i in free],
            options={"initial_simplex": simplex(start, [low_x[i] for i in free],
                                                [high_x[i] for i in free],
                                                [SIMPLEX_STEPS[i] for i in free]),
                     "maxfev": MAX_EVALUATIONS, "xatol": 0.01, "fatol": 1e-4})
        return float(solved.fun), full(solved.x)

    best, x = grid[0][0], list(grid[0][1])
    for number, (_, point) in enumerate(grid[:starts]):
        if progress:
            progress(f"fitting the cost model, start {number + 1} of {starts}")
        found, at = refine(point)
        if found < best:
            best, x = found, at
    if x[1] < unlimited:  # a host limit: kept only where the times show it
        if progress:
            progress("fitting the cost model without a host limit")
        without, at = refine(x, {1: high_x[1]})
        if not term_is_shown(best, without, len(measured)):
            x = at
    cost = model_of(x)
    machine = topology.with_cost(cost, hosts)
    table = tuple((load.schedule.name, load.size_bytes,
                   simulate(load.schedule, machine, load.size_bytes).time_s, load.measured_s)
                  for load in measured)
    return Calibration(cost, hosts, table)


LATENCY_LEVELS = (3e-5, 1e-4, 3e-4, 1e-3, 3e-3)
OVERHEAD_LEVELS = (3e-6, 1e-5, 3e-5, 1e-4, 3e-4)
"""The fine grid's message latencies and overheads (seconds). With the coarse grid's
three of each alone (none, 10 us, 1 ms of latency; none, 10 us, 300 us of overhead) a
rail testbed fit started from 10 us and 1 ms and ended at 54 us and 920 us, median error
10%; the best point, 55 us and 383 us (4%), lay between the coarse levels."""
SIMPLEX_STEPS = (0.1, 0.7, 0.7, 0.7)
"""Nelder-Mead's first steps from a start, on the log scale the fit works in: 10% of link
efficiency, a factor of 2 of host bandwidth, latency and overhead."""
MAX_EVALUATIONS = 100
"""Evaluations of the loss a refinement may spend (each simulates every workload, about
0.1 s for 8 ranks); on the rail testbed Nelder-Mead was within 0.5% of its end by 100."""


def simplex(start: Sequence[float], low: Sequence[float], high: Sequence[float],
            steps: Sequence[float]) -> list[list[float]]:
    """Nelder-Mead's first simplex: ``start`` and, per parameter, ``start`` moved by its
    step, inward where the step would cross a bound.

    Why not least squares (scipy's trust-region ``least_squares``, used before): the
    simulated times are piecewise smooth in the parameters (a message that finishes first
    changes which waits on which), and from grid points at the bounds its finite
    differences gave steps it rejected until its trust region shrank to nothing: on the
    rail testbed (examples/topologies/rail-2x4.json) it stopped where it began, at the
    grid's 10 us of overhead and 1 ms of latency, median error 12%, predicting a 16 KB
    ring 70% slow; Nelder-Mead from this fit's grids finds 55 us and 384 us on the same
    times, median error 3.6%. scipy's default simplex steps 5% of each value, so a start
    at a bound (an efficiency of 1, log 0) gets a flat simplex and never moves in that
    parameter."""
    vertices = [list(start)]
    for i, step in enumerate(steps):
        vertex = list(start)
        vertex[i] = start[i] + step if start[i] + step <= high[i] else start[i] - step
        vertex[i] = max(vertex[i], low[i])
        vertices.append(vertex)
    return vertices


def term_is_shown(loss_with: float, loss_without: float, count: int) -> bool:
    """Whether an optional term of the fit earns its place: dropping it (the others
    refitted) must cost the fit more than the Bayesian information criterion's price of
    one parameter, ``count * ln(loss_without / loss_with) >= ln(count)`` over ``count``
    measured workloads (12, the calibration's: the loss must grow by more than 23%).

    Applied to the host limit. On the emulated mist machine the fit put 0.13 GB/s (scaled)
    there to explain the direct alltoall's 0.88 s (the links give 0.78 s), a local optimum
    (sum of squared log errors 0.036; without the host term 0.032); trees, whose flows all
    run at once, was then predicted 1.4-1.5x slower than it ran (35-52% error; refitted
    without the term: 4-17%). Not applied to the per-message terms: the workloads show
    them weakly (on the rail testbed dropping both overhead and latency costs the fit 17%)
    while schedules of many small messages depend on them (:data:`PER_MESSAGE_RESOLUTION`
    decides those)."""
    if loss_without <= loss_with:
        return False
    return loss_with == 0 or count * math.log(loss_without / loss_with) >= math.log(count)


def fitted_topology(topology: Topology, profile, structure: Topology | None = None,
                    progress: Callable[[str], None] | None = None) -> Calibration:
    """Fit the profile's calibration times (``profile.workloads``) on ``topology``; the
    schedules are rebuilt from ``structure`` (default: ``topology``), as the ranks built
    them, and each rank's host is the profile's host grouping."""
    measured = {(name, size): seconds for name, size, seconds in profile.workloads}
    sizes = sorted({size for _, size, _ in profile.workloads})
    loads: dict[tuple[str | None, int], Workload] = {}
    for load in workloads(structure or topology, sizes):  # a schedule run at its own size
        key = (load.schedule.name, load.size_bytes)  # and the calibration's is one load
        if key in measured:
            loads.setdefault(key, Workload(load.schedule, load.size_bytes, measured[key]))
    return fit(topology, list(loads.values()), profile.nodes, progress=progress)
