"""The front door to synthesis: strategies registered by name, one module each.

Every strategy has the same signature,
``build(topology, kind, *, root=0, chunks=None, **options) -> Schedule``, and says
which collectives it builds. ``synthesize`` picks it by name (like networkx's
``maximum_flow(..., flow_func=...)``); adding a strategy is adding one module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ccweave.collectives import Kind
from ccweave.errors import InputError, NotApplicableError
from ccweave.schedule import Schedule
from ccweave.topology.model import Topology

Build = Callable[..., Schedule]

# modules that register strategies when imported; order is the order `compare` lists them
STRATEGY_MODULES = (
    "ccweave.synth.ring",
    "ccweave.synth.trees",
    "ccweave.synth.recursive",
    "ccweave.synth.direct",
    "ccweave.synth.direct_multipath",
    "ccweave.synth.hierarchical",
    "ccweave.synth.pipelined",
    "ccweave.synth.multipath",
    "ccweave.synth.taccl",
    "ccweave.synth.flow",
    "ccweave.synth.forest",
)


@dataclass(frozen=True)
class Strategy:
    """A registered strategy: its name, what it builds, and the function that builds it."""

    name: str
    collectives: frozenset[Kind]
    build: Build
    description: str
    classic: bool = True
    """Classic strategies (ring, trees, ...) are the baselines new ones are compared with."""
    slow: bool = False
    """Slow strategies (solvers) run in ``compare`` only when named."""
    sized: bool = False
    """The size is an input of the synthesis (option ``size``): ``compare`` builds one
    schedule per size, as TACCL synthesizes one per size."""
    auto: bool = True
    """``auto`` (the fastest strategy per size) tries it. Every strategy but slow ones,
    unless a slow one says so (its solver takes seconds per size, not minutes)."""


_REGISTRY: dict[str, Strategy] = {}
_loaded = False


def register(name: str, collectives: set[Kind] | frozenset[Kind], description: str,
             classic: bool = True, slow: bool = False, sized: bool = False,
             auto: bool | None = None) -> Callable[[Build], Build]:
    """Decorator: register ``build`` as strategy ``name`` for ``collectives``
    (``auto`` defaults to ``not slow``)."""

    def decorate(build: Build) -> Build:
        if name in _REGISTRY and _REGISTRY[name].build is not build:
            raise ValueError(f"strategy {name!r} is registered twice")
        _REGISTRY[name] = Strategy(name, frozenset(collectives), build, description, classic,
                                   slow, sized, not slow if auto is None else auto)
        return build

    return decorate


def _load() -> None:
    global _loaded
    if not _loaded:
        for module in STRATEGY_MODULES:
            importlib.import_module(module)
        _loaded = True


def strategies() -> dict[str, Strategy]:
    """Every registered strategy by name, in :data:`STRATEGY_MODULES` order."""
    _load()
    return dict(sorted(_REGISTRY.items(), key=lambda item: _position(item[1])))


def _position(strategy: Strategy) -> int:
    module = strategy.build.__module__
    return next((number for number, name in enumerate(STRATEGY_MODULES)
                 if module == name or module.startswith(name + ".")), len(STRATEGY_MODULES))


def get_strategy(name: str) -> Strategy:
    known = strategies()
    if name not in known:
        raise InputError(f"unknown strategy {name!r}; choose one of {', '.join(known)}")
    return known[name]


def strategies_for(kind: Kind | str, classic_only: bool = False) -> list[str]:
    """Names of the strategies that build ``kind``."""
    kind = Kind.parse(kind)
    return [s.name for s in strategies().values()
            if kind in s.collectives and (s.classic or not classic_only)]


def synthesize(topology: Topology, kind: Kind | str, strategy: str = "ring", *,
               root: int = 0, chunks: int | None = None, **options: object) -> Schedule:
    """Build a schedule for collective ``kind`` on ``topology`` with ``strategy``.

    Parameters
    ----------
    topology: the machine.
    kind: the collective (``allgather``, ``allreduce``, ...).
    strategy: a registered strategy name (see :func:`strategies`).
    root: the root of broadcast, reduce, gather and scatter.
    chunks: chunks per rank; ``None`` lets the strategy choose.
    options: strategy-specific options (e.g. ``channels`` for ring).

    Raises ``NotApplicableError`` when the strategy cannot build this collective here.
    """
    if not isinstance(topology, Topology):
        raise InputError(f"synthesize: topology must be a Topology, got {type(topology).__name__} "
                         f"{topology!r:.60}; load one with ccweave.topology.io.load "
                         "(a zoo name such as 'ring:4', or a JSON file)")
    kind = Kind.parse(kind)
    chosen = get_strategy(strategy)
    if kind not in chosen.collectives:
        raise NotApplicableError(
            f"strategy {strategy!r} does not build {kind.value}; strategies that do: "
            f"{', '.join(strategies_for(kind))}")
    if not 0 <= root < topology.num_ranks:
        raise InputError(f"root {root} is not a rank of {topology.name!r} "
                         f"(0..{topology.num_ranks - 1})")
    if chunks is not None and (not isinstance(chunks, int) or chunks < 1):
        raise InputError(f"chunks must be a positive integer, got {chunks!r}")
    return chosen.build(topology, kind, root=root, chunks=chunks, **options)
