"""Ask NCCL's example tuner plugin what it would choose: its own C code, built and loaded.

NVIDIA/nccl ``plugins/tuner/example`` builds with plain gcc, no CUDA (its ``Makefile``:
``$(CC) -Inccl -fPIC -shared plugin.c``). :func:`build` compiles it; :class:`ExampleTuner`
loads the library (``ctypes``), starts it as NCCL does (``ncclTunerPlugin_v6.init`` with
the communicator's ranks and nodes, the tuner file in ``NCCL_TUNER_CONFIG_FILE``) and
calls ``getCollInfo`` with a cost table, returning the table it marked and the channels
it set: what NCCL would then run is the cheapest entry (``topoGetAlgoInfo``), on those
channels. A tuner file is then proven by NCCL's parser, not ccweave's.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ccweave.errors import InputError
from ccweave.nccl import constants as C

SYMBOL = "ncclTunerPlugin_v6"
CONFIG_ENV = "NCCL_TUNER_CONFIG_FILE"

_Init = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                         ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p)
_GetCollInfo = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                ctypes.c_int, ctypes.POINTER(ctypes.c_int))
_Finalize = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _TunerV6(ctypes.Structure):
    """``ncclTuner_v6_t`` (``nccl/tuner.h``): name, init, getCollInfo, finalize,
    getChunkSize."""

    _fields_ = (("name", ctypes.c_char_p), ("init", _Init), ("getCollInfo", _GetCollInfo),
                ("finalize", _Finalize), ("getChunkSize", ctypes.c_void_p))


_Table = (ctypes.c_float * len(C.PROTOCOLS)) * len(C.ALGORITHMS)


def build(source: str | Path, out_dir: str | Path, compiler: str = "gcc") -> Path:
    """Compile the example plugin in ``source`` (its ``plugin.c`` and ``nccl/``) into
    ``out_dir``; the library's path."""
    source = Path(source)
    if shutil.which(compiler) is None:
        raise InputError(f"{compiler}: not found; install a C compiler to build the plugin")
    if not (source / "plugin.c").is_file():
        raise InputError(f"{source}: no plugin.c; give NCCL's plugins/tuner/example folder")
    library = Path(out_dir) / "libnccl-tuner-example.so"
    result = subprocess.run([compiler, f"-I{source / 'nccl'}", "-fPIC", "-shared", "-o",
                             str(library), str(source / "plugin.c")],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise InputError(f"{source / 'plugin.c'}: {compiler} failed: "
                         + " ".join(result.stderr.split())[:300])
    return library


class ExampleTuner:
    """One communicator's instance of the plugin, reading ``config``.

    Parameters
    ----------
    library: the built plugin (:func:`build`).
    config: the tuner file (given to the plugin through ``NCCL_TUNER_CONFIG_FILE``).
    ranks, nodes: the communicator's shape, as NCCL passes it to ``init``.
    """

    def __init__(self, library: str | Path, config: str | Path, ranks: int, nodes: int
                 ) -> None:
        self._library = ctypes.CDLL(str(Path(library).resolve()))
        self._plugin = _TunerV6.in_dll(self._library, SYMBOL)
        self._context = ctypes.c_void_p()
        before = os.environ.get(CONFIG_ENV)
        os.environ[CONFIG_ENV] = str(config)
        try:
            status = self._plugin.init(ctypes.byref(self._context), 0, ranks, nodes, None,
                                       None, None)
        finally:
            if before is None:
                del os.environ[CONFIG_ENV]
            else:
                os.environ[CONFIG_ENV] = before
        if status != 0:
            raise InputError(f"{config}: the tuner plugin's init failed (ncclResult {status})")

    def coll_info(self, collective: str, nbytes: int, table: Sequence[Sequence[float]],
                  pipe_ops: int = 1, reg_buff: int = 0
                  ) -> tuple[list[list[float]], int]:
        """``getCollInfo``: the cost table after the plugin marked it, and the channels
        it set (0 would mean "NCCL's own")."""
        cells = _Table()
        for a, row in enumerate(table):
            for p, cost in enumerate(row):
                cells[a][p] = cost
        channels = ctypes.c_int(0)
        status = self._plugin.getCollInfo(self._context, C.FUNCTIONS.index(collective), nbytes,
                                          pipe_ops, ctypes.addressof(cells), len(C.ALGORITHMS),
                                          len(C.PROTOCOLS), reg_buff, ctypes.byref(channels))
        if status != 0:
            raise InputError(f"the tuner plugin's getCollInfo failed (ncclResult {status})")
        return [list(row) for row in cells], channels.value

    def close(self) -> None:
        if self._context:
            self._plugin.finalize(self._context)
            self._context = ctypes.c_void_p()

    def __enter__(self) -> ExampleTuner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
