"""MSCCL++ execution plans: every name and limit as MSCCL++'s executor reads them.

Names (JSON keys, operation names, buffer codes, channel types) are those of the plan
loader, microsoft/mscclpp ``src/core/executor/execution_plan.cc`` (commit 1f5f065d);
limits are the executor's fixed-size tables, ``src/core/include/execution_common.hpp``.
What each operation computes is ``src/core/include/execution_kernel.hpp``'s; ccweave's
reader (:mod:`.mscclpp_read`) and writer (:mod:`.mscclpp_write`) use nothing else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ccweave.collectives import Buffer, Kind

# ---------------------------------------------------------------- the loader's keys

PLAN_KEYS = ("name", "collective", "protocol", "inplace", "gpus", "reuse_resources",
             "use_double_scratch_buffer", "buffer_alignment", "min_message_size",
             "max_message_size", "num_threads_per_block")
GPU_KEYS = ("id", "input_chunks", "output_chunks", "scratch_chunks", "channels",
            "threadblocks", "remote_buffers", "semaphores")
CHANNEL_KEYS = ("channel_type", "connected_to", "buffer_type", "rank_groups")
GROUP_KEYS = ("size", "ranks")
REMOTE_BUFFER_KEYS = ("rank", "type", "access_channel_types")
SEMAPHORE_KEYS = ("init_value",)
THREADBLOCK_KEYS = ("id", "ops", "channels", "remote_buffer_refs")
TB_CHANNEL_KEYS = ("channel_type", "channel_ids", "buff")
REF_KEYS = ("access_channel_type", "remote_buffer_ids")
OP_KEYS = ("name", "channel_type", "channel_ids", "tbg_info", "src_buff", "dst_buff",
           "barrier_id", "num_threadblocks", "semaphore_ids", "iter_context", "ops")
TBG_KEYS = ("tb_id", "tbg_size")
BUFF_KEYS = ("type", "buffer_id", "switch_channel_id", "index", "size")
ITER_KEYS = ("unit_size", "num_chunks")

LL = "LL"
"""The loader's only protocol test: ``protocol == "LL"`` uses packets; anything else is
Simple, spelled ``Simple`` as MSCCL++'s DSL writes it."""
SIMPLE = "Simple"
PROTOCOLS = (SIMPLE, LL)

BUFFER_CODE = {Buffer.INPUT: "i", Buffer.OUTPUT: "o", Buffer.SCRATCH: "s"}
CODE_BUFFER = {code: buffer for buffer, code in BUFFER_CODE.items()}


class Channel(str, enum.Enum):
    """Channel types, spelled as the loader's ``convertToChannelType`` reads them."""

    MEMORY = "memory"
    """Loads and stores into a peer's memory (CUDA IPC): GPUs that reach each other
    without a CPU or NIC between them."""
    PORT = "port"
    """Puts a proxy thread issues (IB across nodes, a copy engine inside one)."""
    SWITCH = "switch"
    """NVLink SHARP multimem over a group of ranks (NVLS)."""
    NONE = "none"


class OpName(str, enum.Enum):
    """Operation names, as the loader's ``getOpType`` reads them."""

    NOP = "nop"
    BARRIER = "barrier"
    PUT = "put"
    PUT_WITH_SIGNAL = "pws"
    PUT_WITH_SIGNAL_AND_FLUSH = "pwsf"
    GET = "get"
    COPY = "copy"
    SIGNAL = "signal"
    WAIT = "wait"
    FLUSH = "flush"
    REDUCE = "re"
    REDUCE_SEND = "res"
    READ_REDUCE = "rre"
    READ_REDUCE_SEND = "rres"
    PUT_PACKETS = "ppkt"
    READ_PUT_PACKETS = "rppkt"
    REDUCE_SEND_PACKETS = "respkt"
    COPY_PACKETS = "cpkt"
    UNPACK_PACKETS = "upkt"
    REDUCE_PACKETS = "repkt"
    REDUCE_COPY_PACKETS = "recpkt"
    REDUCE_COPY_SEND_PACKETS = "recspkt"
    MULTI_LOAD_REDUCE_STORE = "glres"
    MULTI_STORE = "gstore"
    MULTI_STORE_PKT = "gstorepkt"
    RELAXED_SIGNAL = "rlxsignal"
    RELAXED_WAIT = "rlxwait"
    PIPELINE = "pipeline"
    SEM_ACQUIRE = "sem_acquire"
    SEM_RELEASE = "sem_release"


SIGNALS = frozenset({OpName.SIGNAL, OpName.RELAXED_SIGNAL})
WAITS = frozenset({OpName.WAIT, OpName.RELAXED_WAIT})
PUTS = frozenset({OpName.PUT, OpName.PUT_WITH_SIGNAL, OpName.PUT_WITH_SIGNAL_AND_FLUSH})
PACKET_OPS = frozenset({OpName.PUT_PACKETS, OpName.READ_PUT_PACKETS,
                        OpName.REDUCE_SEND_PACKETS, OpName.COPY_PACKETS,
                        OpName.UNPACK_PACKETS, OpName.REDUCE_PACKETS,
                        OpName.REDUCE_COPY_PACKETS, OpName.REDUCE_COPY_SEND_PACKETS,
                        OpName.MULTI_STORE_PKT})
SYNC_OPS = frozenset({OpName.NOP, OpName.BARRIER, OpName.SIGNAL, OpName.WAIT, OpName.FLUSH,
                      OpName.RELAXED_SIGNAL, OpName.RELAXED_WAIT, OpName.SEM_ACQUIRE,
                      OpName.SEM_RELEASE, OpName.PIPELINE})

COLLECTIVES = {Kind.ALLREDUCE: "allreduce", Kind.ALLGATHER: "allgather",
               Kind.REDUCESCATTER: "reducescatter", Kind.ALLTOALL: "alltoall"}
"""The collectives MSCCL++'s DSL defines and its NCCL shim asks plans for (``allgather``
is the loader's own special case: its size is the output's); rooted ones have no plan
field for the root."""

# ---------------------------------------------------------------- the executor's limits


@dataclass(frozen=True)
class Limits:
    """The executor's fixed tables (``execution_common.hpp``): past them a plan is
    refused at load (``MAX_OPERATION``) or reads past an array."""

    operations_per_threadblock: int = 64
    """``MAX_OPERATION``: a pipeline's inner operations count too (the loader flattens
    them)."""
    channels_per_threadblock: int = 16
    """``MAX_CHANNEL``, per channel type; also remote buffers per threadblock per type."""
    channels_per_operation: int = 8
    """``MAX_CHANNEL_PER_OPERATION``."""
    buffers_per_operation: int = 10
    """``MAX_LOCAL_BUFFER_PER_OPERATION + MAX_CHANNEL_PER_OPERATION``."""
    semaphores_per_operation: int = 16
    """``MAX_DEVICE_SEMAPHORES``."""
    barriers: int = 16
    """``MAX_DEVICE_SYNCERS``: barrier ids 0..15."""
    offset_bytes: int = 2**32 - 1
    """Buffer offsets and sizes are ``uint32_t``: a message of 4 GiB or more wraps."""


LIMITS = Limits()
OPEN_MAX_MESSAGE = 2**64 - 1
"""The loader's default ``max_message_size`` (``std::numeric_limits<uint64_t>::max()``)."""
DEFAULT_ALIGNMENT = 16
"""The loader's default ``buffer_alignment``: sizes must be a multiple of it times the
chunk count (``checkMessageSize``)."""
DEFAULT_THREADS = 1024
