"""Topology import: NCCL's topology dump XML and `nvidia-smi topo -m` text become
Topologies with the link table's figures, close to the zoo's machines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ccweave.bounds import lower_bound
from ccweave.cli import main
from ccweave.errors import InputError
from ccweave.topology import io as topology_io
from ccweave.topology import link_table, nccl_xml, nvidia_smi, zoo

FIXTURES = Path(__file__).parent / "fixtures"
DGX_A100_XML = FIXTURES / "nccl_topo_dgx_a100.xml"
NDV2_XML = FIXTURES / "nccl_topo_ndv2.xml"
DGX1_SMI = FIXTURES / "nvidia_smi_topo_dgx1.txt"
DGX_A100_SMI = FIXTURES / "nvidia_smi_topo_dgx_a100.txt"


def busbw(topology, size=2**30) -> float:
    """Bus bandwidth of the allgather bound's bandwidth term (its links' alpha left out)."""
    bound = lower_bound(topology, "allgather", size)
    return bound.busbw * bound.time_s / bound.bandwidth_s / 1e9


def gbps(topology, src, dst) -> float:
    return next(lk.bandwidth for lk in topology.links if (lk.src, lk.dst) == (src, dst)) / 1e9


# --- the link table ------------------------------------------------------------------------

def test_link_table_figures():
    assert [link_table.nvlink_gbps(sm) for sm in (60, 70, 80, 86, 90, 100)] == \
        [20, 25, 25, 14.0625, 25, 50]
    assert link_table.pcie_gen("16.0 GT/s PCIe") == 4 and link_table.pcie_gen("8 GT/s") == 3
    assert link_table.pcie_gen("Unknown speed") is None
    assert link_table.pcie_gbps(3) == 16 and link_table.pcie_gbps(4, 8) == 16
    assert link_table.pcie_gbps(5, 0) == 64  # width 0 (unreported) is x16, as NCCL takes it
    assert link_table.net_gbps(200_000) == 25 and link_table.net_gbps(-1) == 1.25
    assert link_table.cpu_family("x86_64", "GenuineIntel", 6, 85) == "intel-skl"
    assert link_table.cpu_family("x86_64", "GenuineIntel", 6, 0x8F) == "intel-srp"
    assert link_table.cpu_family("x86_64", "AuthenticAMD", 23, 49) == "amd"
    assert link_table.cpu_family("ppc64", "") == "power"
    with pytest.raises(InputError, match="--gpu 'k80'"):
        link_table.generation("k80")


# --- NCCL topology dump --------------------------------------------------------------------

def test_nccl_dgx_a100_ranks_links_groups():
    topo = nccl_xml.read(DGX_A100_XML)
    assert topo.num_ranks == 8 and topo.fabric["nvswitch"].value == "switch"
    assert gbps(topo, 0, "nvswitch") == 300 and gbps(topo, "nvswitch", 5) == 300
    assert {lk.bandwidth / 1e9 for lk in topo.links if lk.kind == "pcie"} == {32}
    assert sum(kind.value == "nic" for kind in topo.fabric.values()) == 8
    assert topo.groups["socket"] == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert topo.groups["node"] == (tuple(range(8)),)
    assert gbps(topo, "cpu0", "cpu1") == link_table.CPU_LINK_GBPS["amd"]


def test_nccl_dgx_a100_bound_matches_zoo_but_for_the_pcie_paths():
    # the zoo's one-node dgx-a100 leaves PCIe out; the dump has each GPU's PCIe4 x16 too
    assert busbw(nccl_xml.read(DGX_A100_XML)) == pytest.approx(busbw(zoo.get("dgx-a100")) + 32)
    two = nccl_xml.read(DGX_A100_XML, nodes=2)
    assert two.num_ranks == 16 and len(two.groups["node"]) == 2
    assert gbps(two, "n1.mlx5_3", "net") == 25  # 200 Gb/s HDR
    assert busbw(two) == pytest.approx(busbw(zoo.get("dgx-a100:2")), rel=0.03)


def test_nccl_ndv2_is_the_zoo_machine():
    topo = nccl_xml.read(NDV2_XML)
    for a in range(8):
        for b in range(8):
            count = zoo.DGX1_NVLINKS[a][b]
            links = [lk for lk in topo.links if (lk.src, lk.dst) == (a, b)]
            assert [lk.bandwidth / 1e9 for lk in links] == ([25.0 * count] if count else [])
    assert gbps(topo, "cpu0", "cpu1") == 20.8 and gbps(topo, "mlx5_0", "cpu0") == 16
    assert busbw(topo) == pytest.approx(busbw(zoo.get("ndv2")))
    assert busbw(nccl_xml.read(NDV2_XML, nodes=2)) == pytest.approx(busbw(zoo.get("ndv2:2")))


GPU = ('<pci busid="0000:{bus}:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" '
       'link_width="16"><gpu dev="{dev}" sm="90" {rank} gdr="1">{inner}</gpu></pci>')
NIC = ('<pci busid="0000:{bus}:00.0" class="0x020000" link_speed="32.0 GT/s PCIe" '
       'link_width="16"><nic><net name="{name}" dev="0" speed="400000" port="1"/></nic></pci>')


def two_gpu_host(host: str, ranks=(0, 1), nic="mlx5_0") -> str:
    nv = '<nvlink target="0000:{}:00.0" count="18" tclass="0x030200"/>'
    gpus = "".join(GPU.format(bus=bus, dev=dev, inner=nv.format(other),
                              rank=f'rank="{rank}"' if rank is not None else "")
                   for dev, (bus, other, rank) in enumerate(zip(("18", "19"), ("19", "18"),
                                                                ranks)))
    return (f'<cpu host_hash="{host}" numaid="0" arch="x86_64" vendor="GenuineIntel" '
            f'familyid="6" modelid="143">{gpus}{NIC.format(bus="1a", name=nic)}</cpu>')


def test_nccl_multi_host_dump_joins_nics_on_one_switch():
    text = f'<system version="1">{two_gpu_host("0xa", (0, 1))}{two_gpu_host("0xb", (2, 3))}' \
           "</system>"
    topo = nccl_xml.parse(text)
    assert topo.num_ranks == 4 and topo.groups["node"] == ((0, 1), (2, 3))
    assert gbps(topo, 0, 1) == 450 and gbps(topo, "n1.mlx5_0", "net") == 50
    assert topo.has_route(0, 3)
    with pytest.raises(InputError, match="--nodes replicates a one-host dump"):
        nccl_xml.parse(text, nodes=2)


def test_nccl_gpus_without_ranks_are_numbered_by_dev():
    topo = nccl_xml.parse(f'<system version="1">{two_gpu_host("0xa", (None, None))}</system>')
    assert topo.num_ranks == 2 and gbps(topo, 1, 0) == 450


@pytest.mark.parametrize(("text", "match"), [
    ('<system><cpu numaid="0"', r"line 1: not valid XML"),
    ("<topology/>", r"line 1: the root element is <topology>"),
    ('<system version="1"></system>', "has no <cpu> element"),
    ('<system version="1">\n<cpu numaid="0" arch="x86_64">\n'
     '<pci busid="0000:18:00.0" class="0x030200" link_speed="8 GT/s" link_width="16">\n'
     '<gpu dev="0" rank="0"/></pci></cpu></system>', r"line 4: <gpu> lacks attribute 'sm'"),
    ('<system version="1">\n<cpu numaid="x"/></system>', r"line 2: <cpu>: attribute numaid='x'"),
])
def test_nccl_bad_input_names_the_line_and_element(text, match):
    with pytest.raises(InputError, match=match):
        nccl_xml.parse(text)


def test_nccl_duplicate_and_missing_ranks():
    dup = f'<system version="1">{two_gpu_host("0xa", (0, 0))}</system>'
    with pytest.raises(InputError, match="rank 0 again"):
        nccl_xml.parse(dup)
    mixed = f'<system version="1">{two_gpu_host("0xa", (0, None))}</system>'
    with pytest.raises(InputError, match="has no 'rank' while other GPUs have one"):
        nccl_xml.parse(mixed)


# --- nvidia-smi topo -m --------------------------------------------------------------------

def test_nvidia_smi_dgx1_is_the_zoo_machine():
    topo = nvidia_smi.read(DGX1_SMI, gpu="v100")
    assert topo.num_ranks == 8 and topo.groups["socket"] == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert gbps(topo, 0, 1) == 50 and gbps(topo, 0, 2) == 25
    assert not [lk for lk in topo.links if (lk.src, lk.dst) == (0, 5)]
    assert sum(kind.value == "pcie" for kind in topo.fabric.values()) == 4
    assert busbw(topo) == pytest.approx(busbw(zoo.get("dgx1")))
    assert busbw(nvidia_smi.read(DGX1_SMI, gpu="v100", nodes=2)) == \
        pytest.approx(busbw(zoo.get("dgx1:2")))


def test_nvidia_smi_dgx_a100_reads_nvswitch_numa_and_nic_names():
    topo = nvidia_smi.read(DGX_A100_SMI, gpu="a100", nodes=2)
    assert gbps(topo, 3, "n0.nvswitch") == 300 and "NVSwitch" in topo.source
    assert gbps(topo, "n1.mlx5_7", "net") == 25
    assert topo.groups["socket"] == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11),
                                     (12, 13, 14, 15))
    slow = nvidia_smi.read(DGX_A100_SMI, gpu="a100", nodes=2, nic_gbits=100)
    assert gbps(slow, "n0.mlx5_0", "net") == 12.5


def test_nvidia_smi_without_nics_or_numa_keeps_one_socket():
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n"
    topo = nvidia_smi.parse(text, gpu="p100")
    assert topo.num_ranks == 2 and gbps(topo, 0, 1) == 80
    assert topo.groups["socket"] == ((0, 1),) and "unknown" in topo.source


@pytest.mark.parametrize(("text", "match"), [
    ("no matrix here\n", "no header line starting with GPU0"),
    ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tPIX\t X \n", r"line 2: GPU0 to GPU1 is 'FOO'"),
    ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tSYS\t X \n", r"line 2: GPU0 to GPU1 is PIX but"),
    ("\tGPU0\tGPU1\nGPU0\t X \tPIX\n", "no row for GPU1"),
    ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPIX\t X \n", r"line 2: row GPU0 has 1 cells"),
    ("\tGPU0\tGPU1\nGPU0\tPIX\tPIX\nGPU1\tPIX\t X \n", r"line 2: GPU0 to itself is 'PIX'"),
    ("\tGPU0\tmlx5_0\nGPU0\t X \tNV2\nmlx5_0\tNV2\t X \n", "NVLinks join GPUs only"),
])
def test_nvidia_smi_bad_text_names_the_line(text, match):
    with pytest.raises(InputError, match=match):
        nvidia_smi.parse(text, gpu="a100")


# --- the command -------------------------------------------------------------------------

def test_topo_import_command_writes_a_loadable_file(tmp_path, capsys):
    out = tmp_path / "a100.json"
    assert main(["topo", "import", str(DGX_A100_XML), "--nodes", "2", "-o", str(out),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["format"] == "nccl-xml" and summary["ranks"] == 16
    assert topology_io.load(out).num_ranks == 16
    smi = tmp_path / "dgx1.json"
    assert main(["topo", "import", str(DGX1_SMI), "--gpu", "v100", "-o", str(smi)]) == 0
    assert "from nvidia-smi" in capsys.readouterr().out
    assert busbw(topology_io.load(smi)) == pytest.approx(busbw(zoo.get("dgx1")))


def test_topo_import_command_errors_are_one_line(tmp_path, capsys):
    assert main(["topo", "import", str(DGX1_SMI), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give --gpu" in err
    bad = tmp_path / "bad.xml"
    bad.write_text('<system version="1">\n<cpu numaid="0">\n<pci busid="0000:01:00.0"/>'
                   "</cpu></system>")
    assert main(["topo", "import", str(bad), "-o", str(tmp_path / "x.json")]) == 2
    assert "bad.xml: line 3: <pci> lacks attribute 'class'" in capsys.readouterr().err


def test_nccl_ranks_sharing_a_gpu_and_nvlinks_to_unused_gpus():
    text = ('<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel">'
            '<pci busid="0000:18:00.0" class="0x030200" link_speed="8 GT/s" link_width="16">'
            '<gpu dev="0" sm="70" rank="0"><nvlink target="19:00.0" count="2" '
            'tclass="0x030200"/></gpu><gpu dev="0" sm="70" rank="1"/></pci>'
            '<pci busid="0000:19:00.0" class="0x030200" link_speed="8 GT/s" link_width="16">'
            '<gpu dev="1" sm="70" rank="2"><nvlink target="0000:aa:00.0" count="2" '
            'tclass="0x030200"/></gpu></pci></cpu></system>')
    topo = nccl_xml.parse(text)
    assert topo.num_ranks == 3 and gbps(topo, 0, 2) == 50 and gbps(topo, 2, 0) == 50
    assert "2 ranks share one GPU" in topo.source and "0000:aa:00.0 ignored" in topo.source


@pytest.mark.parametrize(("flags", "says"), [
    (["--nodes", "100000"], "--nodes 100000: give a whole number of nodes from 1 to 4096"),
    (["--nodes", "0"], "--nodes 0"),
    (["--nic-gbits", "inf"], "--nic-gbits inf: give the NIC's speed in Gb/s"),
    (["--nic-gbits", "1e300"], "--nic-gbits 1e+300"),
    (["--nic-gbits", "nan"], "--nic-gbits nan"),
])
def test_nodes_and_nic_speeds_no_machine_has_are_refused_first(tmp_path, capsys, flags,
                                                               says):
    """``--nodes 100000`` built for minutes (3 GB) before any limit; a NIC of ``inf`` or
    ``1e300`` Gb/s was written into the topology."""
    out = tmp_path / "t.json"
    assert main(["topo", "import", str(NDV2_XML), *flags, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and not out.exists()


def test_too_many_nodes_of_a_server_are_refused_before_they_are_built():
    from ccweave.errors import LimitError
    from ccweave.topology.replicate import replicate

    server = nccl_xml.read(NDV2_XML)
    with pytest.raises(LimitError, match="over the limit of 4,096"):
        replicate(server, {"nic0": 12.5}, 600)


def test_text_on_stdin_is_read_once(tmp_path):
    """The format was sniffed with one read and parsed with another: on a pipe the second
    found nothing."""
    done = subprocess.run([sys.executable, "-m", "ccweave.cli", "topo", "import",
                           "/dev/stdin", "-o", str(tmp_path / "t.json")],
                          input=NDV2_XML.read_text(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert topology_io.load(str(tmp_path / "t.json")).num_ranks == 8
