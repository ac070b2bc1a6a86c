"""Reduction operators: names as NCCL prints them, applied with torch in place."""

from __future__ import annotations

import enum
from collections.abc import Callable

import torch

from ccweave.errors import InputError


class RedOp(str, enum.Enum):
    """How a reduction combines contributions (nccl-tests' ``redop`` column)."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"

    @classmethod
    def parse(cls, value: object) -> RedOp:
        """``"sum"``, a RedOp, or a ``torch.distributed.ReduceOp`` (SUM/PRODUCT/MAX/MIN)."""
        if isinstance(value, RedOp):
            return value
        text = str(value).lower().rsplit(".", 1)[-1]
        text = {"product": "prod"}.get(text, text)
        for op in cls:
            if op.value == text:
                return op
        raise InputError(f"reduction {value!r} is not supported; choose one of "
                         + ", ".join(op.value for op in cls))

    def combiner(self) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]:
        """``combine(out, a, b)`` writing ``a (op) b`` into ``out`` (which may be ``a``)."""
        return _COMBINE[self]


def _sum(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    torch.add(a, b, out=out)


def _prod(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    torch.mul(a, b, out=out)


def _max(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    torch.maximum(a, b, out=out)


def _min(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    torch.minimum(a, b, out=out)


_COMBINE = {RedOp.SUM: _sum, RedOp.PROD: _prod, RedOp.MAX: _max, RedOp.MIN: _min}
