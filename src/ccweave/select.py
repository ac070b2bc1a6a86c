"""Pick the best schedule per message size: the ``auto`` choice, as a :class:`Plan`.

Every candidate strategy is built, proven and simulated at a ladder of sizes (a sized
strategy, one that takes the size as an input, is built and tuned at each of them); the
fastest wins each size, and range boundaries sit at the geometric midpoint between
neighbouring sizes where the winner changes (:meth:`Plan.from_sizes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ccweave.collectives import Kind
from ccweave.compare import Comparison, build_verified, compare, default_strategies
from ccweave.errors import InputError
from ccweave.plan import Plan
from ccweave.synth.registry import get_strategy
from ccweave.topology.model import Topology
from ccweave.units import format_size

AUTO = "auto"
"""The strategy name that means: the fastest strategy at each size."""

DEFAULT_SIZES = tuple(2**k for k in range(10, 31))
"""1 KB .. 1 GB, doubling (nccl-tests' ``-b 1K -e 1G -f 2``)."""


def auto_strategies(kind: Kind | str) -> list[str]:
    """The strategies ``auto`` tries for ``kind``: every one but the slow solvers that
    do not ask to be tried (TACCL's MILPs take minutes per size; name ``taccl`` in
    ``strategies`` to include it). ``compare`` shows the same by default."""
    return default_strategies(Kind.parse(kind))


def best_plan(topology: Topology, kind: Kind | str, sizes: Sequence[int] = DEFAULT_SIZES,
              strategies: Sequence[str] | None = None, root: int = 0,
              chunks: int | None = None,
              progress: Callable[[str], None] | None = None) -> Plan:
    """The plan that uses, at each size, the strategy the simulator finds fastest there.

    Parameters
    ----------
    topology, kind, root, chunks: as :func:`ccweave.synth.synthesize`.
    sizes: the ladder; the plan is the fastest at each of these sizes.
    strategies: candidates (default :func:`auto_strategies`).
    progress: called with a line per synthesis step.

    Returns
    -------
    A :class:`Plan` of verified schedules named ``auto(TOPOLOGY, KIND)``.
    """
    kind = Kind.parse(kind)
    sizes = sorted(set(sizes))
    names = list(strategies) if strategies else auto_strategies(kind)
    return winners_plan(compare(topology, kind, sizes, names, root=root, chunks=chunks,
                                progress=progress))


def winners_plan(result: Comparison) -> Plan:
    """The plan of a comparison's fastest schedule at each of its sizes."""
    sizes = sorted({row.size_bytes for row in result.results})
    winners = {size: result.schedule(result.best(size)) for size in sizes}
    return Plan.from_sizes(winners, name=f"auto({result.topology}, {result.kind.value})")


def strategy_plan(topology: Topology, kind: Kind | str, strategy: str,
                  sizes: Sequence[int] = DEFAULT_SIZES, root: int = 0,
                  chunks: int | None = None, progress: Callable[[str], None] | None = None,
                  **options: object) -> Plan:
    """``strategy`` as a plan over ``sizes``: ``auto`` is :func:`best_plan`; a sized
    strategy is built and proven at each size (unless option ``size`` pins one); any
    other strategy is one proven schedule for every size."""
    kind = Kind.parse(kind)
    if strategy == AUTO:
        if options:
            raise InputError(f"strategy 'auto' takes no options (got "
                             f"{', '.join(sorted(options))}); give them to one strategy")
        return best_plan(topology, kind, sizes, root=root, chunks=chunks, progress=progress)
    if not get_strategy(strategy).sized or "size" in options:
        return Plan.single(build_verified(topology, kind, strategy, root=root, chunks=chunks,
                                          **options))
    schedules = {}
    for size in sorted(set(sizes)):
        if progress:
            progress(f"{strategy}: synthesize for {format_size(size)} and verify")
        schedules[size] = build_verified(topology, kind, strategy, root=root, chunks=chunks,
                                         size=size, **options)
    return Plan.from_sizes(schedules, name=f"{strategy}({topology.name}, {kind.value})")
