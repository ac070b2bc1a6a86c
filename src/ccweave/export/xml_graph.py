"""How the steps of an MSCCL algorithm order each other at run time.

A threadblock runs its steps in order; a step waits on ``(depid, deps)`` and on the
dependencies of the nops just before it, satisfied once that threadblock finishes a step
at or after ``deps`` with ``hasdep=1`` (the only steps that signal). Sends and receives
over one connection (sender gpu, receiver gpu, channel; one threadblock at each end)
match in FIFO order. :func:`build_graph` resolves all of that into predecessor lists and
a deadlock-free order, or names what is wrong.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from ccweave.export.msccl_spec import STEP_TYPES
from ccweave.export.problems import Severity, XmlProblem, where
from ccweave.export.xml_model import AlgoXml, StepXml, TbXml

StepRef = tuple[int, int, int]
"""(gpu, tb id, step position)."""


@dataclass(frozen=True)
class AlgoGraph:
    """Resolved ordering of an algorithm's non-nop steps.

    ``waits[ref]``: steps that must finish first (previous step of the threadblock, the
    dependencies); ``source[ref]``: for a step that receives, the step that sent to it;
    ``order``: every non-nop step after its waits and its source.
    """

    algo: AlgoXml
    tbs: dict[tuple[int, int], TbXml]
    waits: dict[StepRef, tuple[StepRef, ...]]
    source: dict[StepRef, StepRef]
    order: tuple[StepRef, ...]

    def step(self, ref: StepRef) -> StepXml:
        return self.tbs[(ref[0], ref[1])].steps[ref[2]]


def build_graph(algo: AlgoXml) -> tuple[AlgoGraph | None, list[XmlProblem]]:
    """Match sends to receives and order the steps; ``None`` with MALFORMED problems when
    that is impossible (unmatched messages, unsatisfiable waits, a cycle). Assumes the
    per-element rules of :mod:`ccweave.export.xml_check` hold."""
    problems: list[XmlProblem] = []
    tbs = {(gpu.id, tb.id): tb for gpu in algo.gpus for tb in gpu.tbs}
    source = _match(algo, tbs, problems)
    waits = _waits(tbs, problems)
    if any(p.severity is Severity.MALFORMED for p in problems):
        return None, problems
    order = _order(tbs, waits, source, problems)
    if order is None:
        return None, problems
    return AlgoGraph(algo, tbs, waits, source, tuple(order)), problems


def _parts(tb: TbXml, sends: bool) -> list[int]:
    return [i for i, st in enumerate(tb.steps)
            if (STEP_TYPES[st.type].sends if sends else STEP_TYPES[st.type].receives)]


def _match(algo: AlgoXml, tbs: dict[tuple[int, int], TbXml],
           problems: list[XmlProblem]) -> dict[StepRef, StepRef]:
    """Pair the k-th send on each connection with the k-th receive."""
    senders = {(g, tb.send, tb.chan): tb for (g, _), tb in tbs.items() if tb.send >= 0}
    receivers = {(g, tb.recv, tb.chan): tb for (g, _), tb in tbs.items() if tb.recv >= 0}
    source: dict[StepRef, StepRef] = {}
    for (g, peer, chan), tb in senders.items():
        sends = _parts(tb, sends=True)
        other = receivers.get((peer, g, chan))
        if other is None:
            severity = Severity.MALFORMED if sends else Severity.RUNTIME
            problems.append(XmlProblem(
                where(g, tb.id), f"sends to gpu {peer} on channel {chan}, but no threadblock "
                f"of gpu {peer} has recv=\"{g}\" chan=\"{chan}\"; add one (the runtime "
                "connects both ends)", "send", severity))
            continue
        recvs = _parts(other, sends=False)
        if len(sends) != len(recvs):
            problems.append(XmlProblem(
                where(g, tb.id), f"sends {len(sends)} message(s) to gpu {peer} on channel "
                f"{chan} but gpu {peer} tb {other.id} receives {len(recvs)}; every send "
                "needs one receive, in the same order", "send"))
            continue
        for number, (i, j) in enumerate(zip(sends, recvs)):
            if tb.steps[i].cnt != other.steps[j].cnt:
                problems.append(XmlProblem(
                    where(g, tb.id, i), f"message {number} to gpu {peer} carries "
                    f"{tb.steps[i].cnt} chunk(s) but gpu {peer} tb {other.id} step {j} "
                    f"receives {other.steps[j].cnt}", "cnt"))
                break
            source[(peer, other.id, j)] = (g, tb.id, i)
    for (g, peer, chan), tb in receivers.items():
        if (peer, g, chan) not in senders:
            severity = Severity.MALFORMED if _parts(tb, sends=False) else Severity.RUNTIME
            problems.append(XmlProblem(
                where(g, tb.id), f"receives from gpu {peer} on channel {chan}, but no "
                f"threadblock of gpu {peer} has send=\"{g}\" chan=\"{chan}\"", "recv",
                severity))
    return source


def _waits(tbs: dict[tuple[int, int], TbXml],
           problems: list[XmlProblem]) -> dict[StepRef, tuple[StepRef, ...]]:
    """What each non-nop step waits for: its threadblock's previous step and its (and its
    nops') dependencies, each resolved to the step whose signal satisfies it."""
    waits: dict[StepRef, tuple[StepRef, ...]] = {}
    signals = {key: _next_signals(tb) for key, tb in tbs.items()}
    for (g, t), tb in tbs.items():
        pending: list[tuple[int, int]] = []
        previous: StepRef | None = None
        for i, st in enumerate(tb.steps):
            if st.depid >= 0:
                pending.append((st.depid, st.deps))
            if STEP_TYPES[st.type].is_nop:
                continue
            found = [] if previous is None else [previous]
            for depid, deps in pending:
                target = _signal(signals[(g, depid)], g, depid, deps, (g, t, i), problems)
                if target is not None and target not in found:
                    found.append(target)
            waits[(g, t, i)] = tuple(found)
            pending = []
            previous = (g, t, i)
    return waits


def _next_signals(tb: TbXml) -> list[int | None]:
    """Per step position, the first step at or after it that signals (hasdep=1, not a
    nop), or ``None``: one pass from the end, so each wait resolves at once."""
    found: list[int | None] = [None] * len(tb.steps)
    following = None
    for k in range(len(tb.steps) - 1, -1, -1):
        st = tb.steps[k]
        if st.hasdep == 1 and not STEP_TYPES[st.type].is_nop:
            following = k
        found[k] = following
    return found


def _signal(signals: list[int | None], g: int, depid: int, deps: int, waiter: StepRef,
            problems: list[XmlProblem]) -> StepRef | None:
    """The first step at or after ``deps`` in tb ``depid`` that signals (hasdep=1)."""
    k = signals[deps] if 0 <= deps < len(signals) else None
    if k is not None:
        if k != deps:
            problems.append(XmlProblem(
                where(*waiter), f"waits on tb {depid} step {deps}, which does not signal "
                f"(hasdep=0 or a nop); the runtime waits for step {k} instead; set "
                f"hasdep=\"1\" on step {deps}", "deps", Severity.RUNTIME))
        return (g, depid, k)
    problems.append(XmlProblem(
        where(*waiter), f"waits on tb {depid} step {deps}, but no step from there on has "
        "hasdep=\"1\", so the wait never ends; set hasdep=\"1\" on the step waited for",
        "deps"))
    return None


def _order(tbs: dict[tuple[int, int], TbXml], waits: dict[StepRef, tuple[StepRef, ...]],
           source: dict[StepRef, StepRef], problems: list[XmlProblem]) -> list[StepRef] | None:
    """Kahn's algorithm over waits and send->receive edges; a leftover step is on a
    cycle (a deadlock at run time)."""
    preds = {ref: (*before, source[ref]) if ref in source else before
             for ref, before in waits.items()}
    count = {ref: len(before) for ref, before in preds.items()}
    children: dict[StepRef, list[StepRef]] = defaultdict(list)
    for ref, before in preds.items():
        for p in before:
            children[p].append(ref)
    ready = deque(sorted(ref for ref, c in count.items() if c == 0))
    order = []
    while ready:
        ref = ready.popleft()
        order.append(ref)
        for child in children[ref]:
            count[child] -= 1
            if count[child] == 0:
                ready.append(child)
    if len(order) == len(preds):
        return order
    cycle = _cycle({ref for ref, c in count.items() if c > 0}, preds)
    path = " -> ".join(where(*ref) for ref in cycle[:6]) + (" -> ..." if len(cycle) > 6 else "")
    problems.append(XmlProblem(
        where(*cycle[0]), f"a cycle (deadlock): {path} waits on itself through threadblock "
        "order, dependencies and the messages it receives", "deps"))
    return None


def _cycle(stuck: set[StepRef], preds: dict[StepRef, tuple[StepRef, ...]]) -> list[StepRef]:
    """A cycle among ``stuck`` steps, from the first waiter back to itself."""
    ref = min(stuck)
    seen: dict[StepRef, int] = {}
    path: list[StepRef] = []
    while ref not in seen:
        seen[ref] = len(path)
        path.append(ref)
        ref = next(p for p in preds[ref] if p in stuck)
    return list(reversed(path[seen[ref]:]))
