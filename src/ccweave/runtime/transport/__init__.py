"""Ways of moving bytes between ranks: one small interface, one module per backend."""

from ccweave.runtime.transport.base import PeerFailure, Transport

__all__ = ["PeerFailure", "Transport"]
