"""Progress records: what a rank writes is what its launcher reads, and the rank that
holds the others up is named with its collective, its step and who waited on it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from hypothesis import given
from hypothesis import strategies as st

from ccweave.runtime import progress
from ccweave.runtime.progress import Phase, Recorder, Snapshot


def snapshot(rank: int, updated: float, phase: Phase = Phase.RUN, peer: int = -1,
             timeout: float = 5.0) -> Snapshot:
    return Snapshot(rank, 1000 + rank, phase, updated, timeout, "allreduce", 262144, 37, 5,
                    12, peer, False, 7, 1 if peer >= 0 else 0)


def test_a_record_reads_back_as_written(tmp_path):
    recorder = Recorder(tmp_path, 3, 15.0)
    assert recorder.active
    recorder.run(progress.kind_code("allgather"), 64 << 20, 4, 30)
    recorder.step(11, 2, True, 9, 3)
    found = progress.read_all(tmp_path)[3]
    assert (found.phase, found.kind, found.size_bytes, found.call, found.ops_done, found.ops,
            found.peer, found.sending, found.transfer, found.waits, found.timeout) == \
        (Phase.RUN, "allgather", 64 << 20, 4, 11, 30, 2, True, 9, 3, 15.0)
    assert found.step() == ("allgather of 64.0 MB, call 4, 11 of 30 ops done, waiting on a "
                            "send of transfer 9 to rank 2 (and 2 more)")
    with recorder.around(Phase.BARRIER):
        assert progress.read_all(tmp_path)[3].phase is Phase.BARRIER
    assert progress.read_all(tmp_path)[3].phase is Phase.IDLE
    recorder.close()
    assert progress.read_all(tmp_path)[3].phase is Phase.DONE


def test_no_folder_records_nothing_and_junk_is_not_a_record(tmp_path):
    recorder = Recorder(None, 0, 5.0)
    recorder.run(0, 1, 1, 1)
    recorder.step(1, -1, False, 0, 0)
    assert not recorder.active
    (tmp_path / "rank0.progress").write_bytes(b"\0" * 200)
    (tmp_path / "rank1.progress").write_bytes(b"CCWP")
    assert progress.read_all(tmp_path) == {}


def test_the_rank_waited_on_whose_progress_froze_first_is_named():
    now = 1000.0
    records = {0: snapshot(0, now - 6, peer=2), 1: snapshot(1, now - 7, peer=2),
               2: snapshot(2, now - 9, peer=1), 3: snapshot(3, now - 8, peer=0)}
    line = progress.diagnose(records, stopped={2}, now=now)
    assert line == ("rank 2 (stopped: SIGSTOP or a debugger) made no progress for 9 s, "
                    "allreduce of 256.0 KB, call 37, 5 of 12 ops done, waiting on a receive "
                    "of transfer 7 from rank 1; rank(s) 0, 1 waited on it")
    assert progress.stalled_for(records, now) == 6
    # a rank that never wrote its record is the one to name
    del records[3]
    assert progress.diagnose(records, ranks=4, now=now).startswith("rank(s) 3 never got")
    assert progress.diagnose({}, ranks=4) is None  # not a ccweave job


def test_a_stopped_rank_is_named_though_a_peer_waiting_on_it_has_the_older_record():
    """Rank 3 waited on rank 2 since before rank 2 was stopped (seen in ci-local: rank 2
    moved on another op, then the SIGSTOP came), so rank 3's record is older; the stopped
    rank is the one that holds the others up."""
    now = 1000.0
    records = {0: snapshot(0, now - 3, peer=3), 1: snapshot(1, now - 3, peer=0),
               2: snapshot(2, now - 4, peer=1), 3: snapshot(3, now - 5, peer=2)}
    assert progress.diagnose(records, now=now).startswith("rank 3 made no progress")
    assert progress.diagnose(records, stopped={2}, now=now).startswith(
        "rank 2 (stopped: SIGSTOP or a debugger) made no progress for 4 s")


@given(st.lists(st.floats(0, 100), min_size=1, max_size=8), st.data())
def test_the_named_rank_is_one_not_done_and_others_wait_on_it_where_any_does(ages, data):
    records = {rank: snapshot(rank, 1000 - age,
                              data.draw(st.sampled_from(list(Phase)), label="phase"),
                              data.draw(st.integers(-1, len(ages) - 1), label="peer"))
               for rank, age in enumerate(ages)}
    suspect = progress.culprit(records)
    live = [r for r in records.values() if r.phase is not Phase.DONE]
    if not live:
        assert suspect is None
        return
    assert suspect.phase is not Phase.DONE
    waited_on = {r.peer for r in live if r.phase is Phase.RUN}
    if len(live) > 1 and waited_on & {r.rank for r in live}:
        assert suspect.rank in waited_on


def test_the_watchdog_calls_a_job_hung_only_when_a_rank_waits_past_the_timeout(tmp_path):
    for rank in range(2):
        recorder = Recorder(tmp_path, rank, 0.2)
        recorder.run(0, 1024, 1, 4)
    watchdog = progress.Watchdog(tmp_path, 2, grace=0.3)
    assert not watchdog.hung()
    time.sleep(0.6)
    assert watchdog.records(fresh=True) and watchdog.hung()
    for rank in range(2):
        Recorder(tmp_path, rank, 0.2).phase(Phase.IDLE)  # between collectives: not hung
    time.sleep(0.6)
    watchdog.records(fresh=True)
    assert not watchdog.hung()


def test_a_stopped_process_is_seen_as_stopped():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not progress.process_stopped(child.pid)
        child.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not progress.process_stopped(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert progress.process_stopped(child.pid)
    finally:
        child.kill()
        child.wait()


def test_what_a_rank_leaves_instead_of_a_record_is_not_read(tmp_path):
    """A rank of ``testbed run`` is any program: a FIFO named like a record blocked the
    launcher for ever, a link to /dev/zero filled its memory, and a record that lies
    (NaN times, a rank of a billion, more ops done than there are) named nonsense."""
    import os
    import struct
    import threading

    os.mkfifo(tmp_path / "rank0.progress")
    (tmp_path / "rank1.progress").symlink_to("/dev/zero")
    (tmp_path / "rank2.progress").mkdir()
    (tmp_path / "rank3.progress").write_bytes(struct.pack(
        "<4sHHiidd12q", b"CCWP", 1, 1, 10**9, -5, float("nan"), float("-inf"), 0, -2**62,
        -7, 5, 3, 2**40, 1, 4, 2, 0, 0, 0))
    Recorder(tmp_path, 4, 30.0).run(0, 1024, 1, 3)
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(progress.read_all(tmp_path)),
                              daemon=True)
    reader.start()
    reader.join(10)
    assert found, "reading the records blocked"
    assert list(found[0]) == [4]
