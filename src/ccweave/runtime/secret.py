"""The per-job secret that admits a rank's data connections (``transport/sockets.py``).

A launcher draws one per job and hands it to its ranks in their environment
(:data:`ENV`), never on a command line, where ``ps`` shows it to every user. Ranks that
an outside launcher (torchrun) started without one take rank 0's over the process group.
A connecting rank proves that it knows the secret with an HMAC (RFC 2104, SHA-256) of its
hello, bound to the job and to the rank it dials: the secret itself never crosses the
wire, and a hello seen once opens no other connection. No torch here: launchers import it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping

from ccweave.errors import InputError

ENV = "CCWEAVE_JOB_SECRET"
"""The environment variable that carries the secret to a job's ranks."""
MAC_BYTES = hashlib.sha256().digest_size
MIN_CHARS = 16
"""The shortest secret accepted from the environment (a launcher draws 64 hex digits)."""


def new_secret() -> str:
    """A fresh secret for one job: 256 random bits as hex (``secrets``, the OS's CSPRNG)."""
    return secrets.token_hex(32)


def from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The job's secret as its launcher gave it (``None``: none was given).

    Raises ``InputError`` naming :data:`ENV` when it is too short to keep a guess out.
    """
    value = (os.environ if environ is None else environ).get(ENV)
    if value is None:
        return None
    if len(value) < MIN_CHARS:
        raise InputError(f"{ENV} has {len(value)} character(s), under the {MIN_CHARS} a "
                         "secret needs; give a long random one (python -c 'import secrets; "
                         "print(secrets.token_hex(32))'), the same to every rank, or unset it")
    return value.encode()


def hello_mac(secret: bytes, job: bytes, destination: int, hello: bytes) -> bytes:
    """The MAC a rank sends after ``hello`` (its rank, channel and route) when it dials
    rank ``destination`` of the job ``job`` (a nonce rank 0 draws for each job)."""
    message = b"ccweave hello\0" + job + destination.to_bytes(8, "little", signed=True) + hello
    return hmac.new(secret, message, hashlib.sha256).digest()


def hello_is_genuine(secret: bytes, job: bytes, destination: int, hello: bytes,
                     mac: bytes) -> bool:
    """Whether ``mac`` is :func:`hello_mac` of this hello (compared in constant time)."""
    return hmac.compare_digest(hello_mac(secret, job, destination, hello), mac)
