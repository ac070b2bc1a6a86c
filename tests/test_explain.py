"""``ccweave explain``: NCCL Inspector records, written as the Inspector's README documents
them (NVIDIA/nccl plugins/profiler/inspector/README.md), read as calls and set beside the
bound, NCCL's model and ccweave's best, flagging where another choice is faster."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccweave.cli import main
from ccweave.errors import InputError
from ccweave.nccl.explain import FASTER_BY, explain
from ccweave.nccl.inspector import read
from ccweave.nccl.model import nccl_model
from ccweave.topology import zoo

# The README's two examples, as printed there (indented), one after the other.
README_JSON = """{
  "header": {
    "id": "0x7f8c496ae9f661",
    "rank": 2,
    "n_ranks": 8,
    "nnodes": 1
  },
  "metadata": {
    "inspector_output_format_version": "v4.0",
    "git_rev": "",
    "rec_mechanism": "profiler_plugin",
    "dump_timestamp_us": 1748030377748202,
    "hostname": "example-hostname",
    "pid": 1639453
  },
  "coll_perf": {
    "coll": "AllReduce",
    "coll_sn": 1407,
    "coll_msg_size_bytes": 17179869184,
    "coll_exec_time_us": 61974,
    "coll_algobw_gbs": 277.210914,
    "coll_busbw_gbs": 485.119099
  }
}
{
  "header": {
    "id": "0xe62dedaa97644a",
    "rank": 4,
    "n_ranks": 8,
    "nnodes": 1
  },
  "metadata": {
    "inspector_output_format_version": "v4.0",
    "git_rev": "9019a1912-dirty",
    "rec_mechanism": "nccl_profiler_interface",
    "dump_timestamp_us": 1752867229276385,
    "hostname": "example-hostname",
    "pid": 438776
  },
  "coll_perf": {
    "coll": "ReduceScatter",
    "coll_sn": 1231,
    "coll_msg_size_bytes": 2147483648,
    "coll_exec_time_us": 41057,
    "coll_timing_source": "kernel_gpu",
    "coll_algobw_gbs": 418.439467,
    "coll_busbw_gbs": 366.134533,
    "event_trace_sn": {
      "coll_start_sn": 1,
      "coll_stop_sn": 2,
      "kernel_events": [
        {
          "channel_id": 0,
          "kernel_start_sn": 3,
          "kernel_stop_sn": 48,
          "kernel_record_sn": 47
        }
      ]
    }
  }
}
"""
README_PROM = (
    'nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",'
    'gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",collective="AllReduce",'
    'message_size="4-5GB",algo_proto="Ring_ll"} 678.263\n'
    'nccl_collective_exec_time_microseconds{version="v5.1",slurm_job_id="unknown",'
    'node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",'
    'collective="AllReduce",message_size="4-5GB",algo_proto="Ring_ll"} 9498.47\n'
    'nccl_p2p_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",'
    'gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",p2p_operation="Send",'
    'message_size="512-513MB"} 464.9\n')


def record(coll: str, size: int, time_us: int, ranks: int = 8, comm: str = "0xabc") -> str:
    """One record in the plugin's own layout: one compact object per line."""
    return json.dumps({"header": {"id": comm, "rank": 0, "n_ranks": ranks, "nnodes": 1},
                       "metadata": {"inspector_output_format_version": "v4.0"},
                       "coll_perf": {"coll": coll, "coll_sn": 1, "coll_msg_size_bytes": size,
                                     "coll_exec_time_us": time_us,
                                     "coll_timing_source": "kernel_gpu",
                                     "coll_algobw_gbs": 0.0, "coll_busbw_gbs": "nan"}}) + "\n"


def prom(coll: str, bucket: str, algo_proto: str, busbw: float, time_us: float,
         ranks: int = 8) -> str:
    labels = (f'version="v5.1",slurm_job_id="unknown",node="n",gpu="GPU0",comm_name="dp",'
              f'n_nodes="1",nranks="{ranks}",collective="{coll}",message_size="{bucket}",'
              f'algo_proto="{algo_proto}"')
    return (f"nccl_bus_bandwidth_gbs{{{labels}}} {busbw}\n"
            f"nccl_collective_exec_time_microseconds{{{labels}}} {time_us}\n")


def test_the_readme_json_records_are_read_as_calls(tmp_path):
    path = tmp_path / "rank.log"
    path.write_text(README_JSON)
    calls = read([path]).calls
    allreduce, reducescatter = calls
    assert (allreduce.collective.value, allreduce.size_bytes, allreduce.busbw_GBps,
            allreduce.ranks, allreduce.algorithm) == ("allreduce", 17179869184, 485.119099, 8,
                                                      None)
    assert allreduce.time_s == pytest.approx(0.061974)
    # reduce-scatter's coll_msg_size_bytes is one rank's part: nccl-tests' size is 8 times
    assert reducescatter.size_bytes == 8 * 2147483648 and reducescatter.channels == 1
    assert reducescatter.source == f"{path}:25"  # where its object starts


def test_the_readme_prometheus_lines_say_what_ran(tmp_path):
    path = tmp_path / "nccl_inspector_metrics_GPU-0.prom"
    path.write_text(README_PROM)
    reading = read([tmp_path])
    (call,) = reading.calls
    assert (call.collective.value, call.algorithm, call.protocol, call.ranks) == (
        "allreduce", "ring", "ll", 4)
    assert 4 * 2**30 <= call.size_bytes < 5 * 2**30 and call.bucket == "4-5GB"
    # the size the bucket's bandwidth and time imply: busbw / (2 * 3 / 4) * time
    assert call.size_bytes == int(678.263 / 1.5 * 1e9 * 9498.47e-6)
    assert reading.skipped == ("1 point-to-point buckets",)


def test_nan_busbw_is_recomputed_as_nccl_tests_does(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(record("AllGather", 2**20, 100))
    (call,) = read([path]).calls
    assert call.size_bytes == 8 * 2**20
    assert call.busbw_GBps == pytest.approx(8 * 2**20 / 100e-6 / 1e9 * 7 / 8)


@pytest.mark.parametrize(("text", "says"), [
    ('{"header": {"n_ranks": 8, "nnodes": 1}, "coll_perf": {"coll": "AllReduce"}}',
     "coll_perf.coll_msg_size_bytes is missing"),
    ('{"header": {"n_ranks": 0, "nnodes": 1}, "coll_perf": {"coll": "AllReduce", '
     '"coll_msg_size_bytes": 8, "coll_exec_time_us": 1}}', "header.n_ranks is 0"),
    ("[1, 2]", "expected an object"),
    ('{"header": ', "not NCCL Inspector output"),
    ('{"header": {"n_ranks": NaN}}', "NaN is not a number JSON has"),
    (prom("AllReduce", "lots", "Ring_LL", 1.0, 1.0), "message_size='lots'"),
    ('nccl_bus_bandwidth_gbs{collective="AllReduce"} 1\nsomething else\n',
     "not an NCCL Inspector metric line"),
    (prom("Send", "1-2MB", "Ring_LL", 1.0, 1.0), "no collective calls"),
])
def test_bad_records_are_refused_naming_the_place(tmp_path, text, says):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(InputError, match=says.replace("(", r"\(").replace("[", r"\[")) as error:
        read([path])
    assert str(error.value).startswith(str(path))


@pytest.fixture(scope="module")
def dgx_a100():
    topo = zoo.get("dgx-a100")
    return topo, nccl_model(topo)


def test_rows_flag_a_faster_nccl_choice_and_a_faster_schedule(tmp_path, dgx_a100):
    topo, model = dgx_a100
    path = tmp_path / "metrics.prom"
    # 64 MB allreduce that ran tree/LL: NCCL's own model prefers ring/simple by far
    path.write_text(prom("AllReduce", "64-65MB", "Tree_LL", 100.5, 1168.4))
    row, = explain(read([path]).calls, topo, model, ["rabenseifner"]).rows
    assert row.ran == "tree/ll" and row.nccl_pick.label == "nccl ring/simple x24"
    assert row.nccl_pick.time_s <= row.nccl_ran.time_s * (1 - FASTER_BY)
    assert any("export NCCL_ALGO=Ring NCCL_PROTO=Simple" in f for f in row.flags)
    assert row.ratio_to_bound == pytest.approx(row.time_s / row.bound_s)
    assert row.bound_busbw_GBps == pytest.approx(300.0)  # dgx-a100's NVSwitch cut
    # ccweave's best offered beats its own simulation of NCCL's tree by more than 10%
    schedule = [f for f in row.flags if f.startswith("ccweave's rabenseifner")]
    assert schedule and "against" in schedule[0] and "double-binary-tree" in schedule[0]


def test_no_flag_where_what_ran_is_the_models_pick_and_no_schedule_is_faster(tmp_path,
                                                                            dgx_a100):
    topo, model = dgx_a100
    pick = model.choose("allreduce", 64 * 2**20)
    path = tmp_path / "metrics.prom"
    name = {"ring": "Ring", "tree": "Tree"}[pick.algorithm]
    proto = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}[pick.protocol]
    path.write_text(prom("AllReduce", "64-65MB", f"{name}_{proto}", 280.0, 420.0))
    row, = explain(read([path]).calls, topo, model, ["ring"]).rows
    assert row.ran == f"{pick.algorithm}/{pick.protocol}" and row.flags == ()


def test_records_of_another_communicator_size_are_left_out(tmp_path, dgx_a100):
    topo, model = dgx_a100
    path = tmp_path / "r.json"
    path.write_text(record("AllReduce", 2**20, 40) + record("AllReduce", 2**20, 30, ranks=4))
    result = explain(read([path]).calls, topo, model, ["ring"])
    assert [row.records for row in result.rows] == [1]
    assert result.skipped == ("1 record(s) of communicators of 4 ranks: dgx-a100 has 8",)


def test_the_command_prints_the_table_and_the_flags(tmp_path, capsys):
    path = tmp_path / "metrics.prom"
    path.write_text(prom("AllReduce", "64-65MB", "Tree_LL", 100.5, 1168.4)
                    + prom("AllGather", "1-2MB", "Ring_Simple", 80.0, 150.0))
    code = main(["explain", str(path), "--topology", "dgx-a100", "--strategies", "ring"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "tree/ll" in out and "ring/simple" in out
    assert "allreduce 66048KB: NCCL's model: ring/simple would take" in out
    code = main(["explain", str(path), "--topology", "dgx-a100", "--strategies", "ring",
                 "--json"])
    data = json.loads(capsys.readouterr().out)
    assert [r["collective"] for r in data["rows"]] == ["allgather", "allreduce"]
    assert data["rows"][0]["size_bytes"] >= 8 * 2**20  # one rank's 1-2 MB, times 8


@pytest.mark.parametrize("argv", [
    ["explain", "/nonexistent/records.json", "--topology", "dgx-a100"],
    ["explain", "RECORDS", "--topology", "nowhere"],
    ["explain", "RECORDS", "--topology", "dgx-a100", "--strategies", ",,"],
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv):
    path = tmp_path / "r.json"
    path.write_text(record("AllReduce", 2**20, 40))
    code = main([str(path) if arg == "RECORDS" else arg for arg in argv])
    out, err = capsys.readouterr()
    assert out == ""
    assert code == 2 and err.startswith("ccweave: error: ") and err.count("\n") == 1


def test_a_run_faster_than_the_bound_says_the_topology_is_not_that_machine(tmp_path):
    """The Inspector README's H100 allreduce (485 GB/s of busbw, NVLS) given an A100's
    topology: faster than dgx-a100's bound, and flagged; on dgx-h100 (450 GB/s of NVLink
    and 64 of PCIe per GPU) it is within the bound, and nothing is flagged."""
    path = tmp_path / "rank.log"
    path.write_text(README_JSON)
    for machine in ("dgx-a100", "dgx-h100"):
        topo = zoo.get(machine)
        rows = explain(read([path]).calls, topo, nccl_model(topo), ["ring"]).rows
        allreduce = next(r for r in rows if r.collective.value == "allreduce")
        flagged = [f for f in allreduce.flags if f.startswith("measured faster than the bound")]
        if machine == "dgx-a100":
            assert allreduce.ratio_to_bound < 1
            assert flagged and flagged[0].startswith(
                "measured faster than the bound (0.62 of it): dgx-a100") and "NVLS" in flagged[0]
        else:
            assert allreduce.ratio_to_bound > 1 and not flagged
            assert not any("bound" in f for r in rows for f in r.flags)


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(["n_ranks", "nnodes", "coll", "coll_msg_size_bytes",
                              "coll_exec_time_us", "coll_busbw_gbs", "kernel_events"]),
       value=st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                       st.floats(allow_nan=False), st.text(max_size=8),
                       st.lists(st.integers(), max_size=3)))
def test_any_field_value_is_read_or_refused_in_one_line(tmp_path_factory, field, value):
    data = json.loads(record("ReduceScatter", 2**20, 100))
    (data["header"] if field in ("n_ranks", "nnodes") else data["coll_perf"])[field] = value
    path = tmp_path_factory.mktemp("r") / "r.json"
    path.write_text(json.dumps(data))
    try:
        calls = read([path]).calls
    except InputError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path))
        return
    assert all(c.time_s > 0 and c.size_bytes > 0 and c.ranks >= 1 for c in calls)


def test_records_nested_past_any_record_are_refused_before_parsing(tmp_path, capsys):
    """The records are parsed one after another with json's recursive decoder: 100,000
    levels were a RecursionError traceback."""
    path = tmp_path / "r.json"
    path.write_text(record("AllReduce", 2**20, 40) + "[" * 100_000 + "]" * 100_000)
    assert main(["explain", str(path), "--topology", "dgx-a100"]) == 2
    err = capsys.readouterr().err
    assert "nested 100,000 deep" in err and err.count("\n") == 1
