"""Name the rank that died, not just the neighbour that noticed.

A rank that loses a peer writes ``lost/<rank> = <peer>`` to the job's key-value store
before it raises and exits; a rank that then loses *it* follows those notes to the first
rank that left none: the one that died. The store must outlive ranks (torchrun's agent
store, or the one ``ccweave run`` hosts in the launcher).
"""

from __future__ import annotations

import contextlib

PREFIX = "ccweave/lost/"


class FaultBoard:
    """Per-job notes on which rank lost which peer, kept in a ``torch.distributed`` Store."""

    def __init__(self, store: object, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size

    def report(self, peer: int) -> None:
        """Record that this rank lost ``peer`` (best effort: the store may be gone)."""
        with contextlib.suppress(Exception):  # a fault report must never raise a second fault
            self.store.set(f"{PREFIX}{self.rank}", str(peer))  # type: ignore[attr-defined]

    def _note(self, rank: int) -> int | None:
        key = f"{PREFIX}{rank}"
        try:
            if not self.store.check([key]):  # type: ignore[attr-defined]
                return None
            value = int(self.store.get(key))  # type: ignore[attr-defined]
        except Exception:
            return None
        return value if 0 <= value < self.world_size else None

    def root_cause(self, peer: int) -> tuple[int, list[int]]:
        """The rank that died first, following notes from ``peer``; and the chain walked."""
        chain, current = [peer], peer
        while True:
            lost = self._note(current)
            if lost is None or lost in chain or lost == self.rank:
                return current, chain
            chain.append(lost)
            current = lost

    def explain(self, peer: int) -> str:
        root, chain = self.root_cause(peer)
        if root == peer:
            return f"peer rank {peer} died or stopped without reporting a fault"
        via = " -> ".join(f"rank {r}" for r in chain)
        return f"rank {root} died (noticed through {via}, which lost it first)"

