"""What NCCL would run beside ccweave's schedules: its choice and its model's time per size,
the rows ``ccweave compare`` adds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ccweave.bounds import Bound
from ccweave.collectives import Collective, Kind
from ccweave.nccl.model import TuningModel
from ccweave.units import GB_PER_S


@dataclass(frozen=True)
class NcclResult:
    """NCCL's choice at one size and its model's time, in nccl-tests' terms."""

    size_bytes: int
    algorithm: str
    protocol: str
    channels: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    bound_s: float
    ratio_to_bound: float

    @property
    def label(self) -> str:
        return f"nccl {self.algorithm}/{self.protocol} x{self.channels}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def predict(model: TuningModel, kind: Kind, sizes: Sequence[int],
            bounds: Sequence[Bound]) -> list[NcclResult]:
    """NCCL's choice and time for ``kind`` at each size, against that size's bound."""
    rows = []
    for size, bound in zip(sizes, bounds, strict=True):
        choice = model.choose(kind, size)
        algbw = size / choice.time_s / GB_PER_S
        busbw = algbw * Collective(kind, model.system.ranks).busbw_factor
        rows.append(NcclResult(size, choice.algorithm, choice.protocol, choice.channels,
                               choice.time_s, algbw, busbw, bound.time_s,
                               bound.ratio(choice.time_s)))
    return rows

