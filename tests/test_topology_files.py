"""The topology files users actually have: cloud VMs' bare PCI trees (NCCL_TOPO_FILE), NCCL
dumps with virtual bridges, hwloc XML; the GPU fabric named, never guessed; several nodes
on a switch or on rails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccweave.bounds import lower_bound
from ccweave.cli import main
from ccweave.errors import InputError, TopologyError
from ccweave.topology import gpu_fabric, hwloc_xml, nccl_xml, zoo
from ccweave.topology import io as topology_io
from ccweave.topology.nccl_xml import Options
from tests.strategies import mutated, pci_trees

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = Path(__file__).parents[2] / "shared" / "fixtures" / "nccl-topo"
AZURE = SHARED / "azure-ndv5-topo.xml"
VM_DUMP = FIXTURES / "nccl_topo_h100_vm.xml"
HWLOC_NVLINK = FIXTURES / "hwloc_4gpu_nvlink.xml"
HWLOC_PCIE = FIXTURES / "hwloc_4gpu_pcie.xml"
H100 = Options(gpu_fabric=("h100-nvswitch",))
needs_azure = pytest.mark.skipif(not AZURE.exists(), reason=f"{AZURE} missing (shared fixtures "
                                 "of NCCL topology files, not shipped with the repository)")


def gbps(topology, src, dst) -> float:
    return next(lk.bandwidth for lk in topology.links if (lk.src, lk.dst) == (src, dst)) / 1e9


def kinds(topology) -> dict[str, int]:
    return topology.summary()["fabric"]


def one_line(error: Exception) -> str:
    message = str(error)
    assert "\n" not in message and message
    return message


def class_code_tree(dump: Path) -> str:
    """``dump`` with its <gpu> and <nic> children removed: the bare PCI tree a VM ships."""
    root = nccl_xml.parse_xml(dump.read_text(), str(dump))

    def render(element) -> str:
        if element.tag in ("gpu", "nic"):
            return ""
        attrs = "".join(f' {k}="{v}"' for k, v in element.attrs.items())
        return f"<{element.tag}{attrs}>{''.join(map(render, element.children))}</{element.tag}>"

    return render(root)


# --- Azure's NCCL_TOPO_FILE: a PCI tree of class codes ------------------------------------

@needs_azure
def test_azure_tree_imports_with_a_named_fabric():
    topo = nccl_xml.read(AZURE, options=H100)
    # 8 bridges, and each socket's memory sides (host_memory: cpuN.write, cpuN.read)
    assert topo.num_ranks == 8 and kinds(topo) == {"cpu": 2, "pcie": 12, "nic": 8, "switch": 1}
    # GPUs in ascending PCI bus id: 0001, 0002, 0003, 0008 on NUMA 0; 0009, 000a.. on NUMA 1
    assert topo.groups["socket"] == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert gbps(topo, 3, "pcie@ffff:ff:04.0") == 64 and gbps(topo, 4, "pcie@ffff:ff:05.0") == 64
    assert gbps(topo, 0, "nvswitch") == 450 == gbps(topo, "nvswitch", 7)
    assert gbps(topo, "cpu0", "cpu1") == 32  # Sapphire Rapids UPI (modelid 143)
    # its 8 DDR5-4800 channels, 307.2 GB/s, half each way, behind the bridges' x16 Gen5
    assert gbps(topo, "pcie@ffff:ff:01.0", "cpu0.write") == 64
    assert gbps(topo, "cpu0.write", "cpu0") == 153.6 == gbps(topo, "cpu1", "cpu1.read")
    assert "307.2 GB/s" in topo.provenance.links["memory"]
    assert "h100-nvswitch" in topo.provenance.links["nvlink"]
    assert not topo.provenance.warnings  # every bridge is x16 Gen5: nothing to correct
    assert topo.cost == zoo.GPU_SERVER_COST


@needs_azure
def test_gpus_are_ranked_in_pci_bus_id_order_not_file_order():
    text = AZURE.read_text()
    first, second = text.index('  <cpu numaid="0"'), text.index('  <cpu numaid="1"')
    end = text.index("</system>")
    swapped = text[:first] + text[second:end] + text[first:second] + text[end:]
    topo = nccl_xml.parse(swapped, source="swapped.xml", options=H100)
    assert gbps(topo, 0, "pcie@ffff:ff:01.0") == 64  # GPU 0001:00:00.0 is still rank 0
    assert gbps(topo, 7, "pcie@ffff:ff:08.0") == 64  # and 000c:00:00.0 rank 7
    assert sorted(topo.groups["socket"]) == [(0, 1, 2, 3), (4, 5, 6, 7)]


@needs_azure
def test_azure_tree_without_a_fabric_is_refused_naming_the_options(tmp_path, capsys):
    with pytest.raises(InputError) as error:
        nccl_xml.read(AZURE)
    message = one_line(error.value)
    assert "8 GPUs known by PCI class code only" in message
    for option in gpu_fabric.FAMILIES:
        assert option in message
    assert main(["topo", "import", str(AZURE), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gpu-fabric" in err and not (tmp_path / "x.json").exists()


@needs_azure
def test_azure_node_joins_on_rails_and_on_a_switch():
    rails = nccl_xml.read(AZURE, nodes=2, options=Options(("h100-nvswitch",), network="rails"))
    flat = nccl_xml.read(AZURE, nodes=2, options=H100)
    assert rails.num_ranks == flat.num_ranks == 16
    assert {f for f, k in rails.fabric.items() if k.value == "switch"} == \
        {"n0.nvswitch", "n1.nvswitch", "spine", *(f"rail{k}" for k in range(8))}
    # NIC k of every node on leaf k; leaf to spine as fast as its two NICs (non-blocking)
    assert gbps(rails, "n1.nic@0103:00:00.0", "rail2") == 50
    assert gbps(rails, "rail2", "spine") == 100
    assert gbps(flat, "n1.nic@0103:00:00.0", "net") == 50
    same_rail = rails.route_alpha(2, 10)
    assert rails.route_alpha(2, 11) > same_rail  # crosses the spine
    size = 2**30
    assert lower_bound(rails, "allgather", size).bandwidth_s == \
        pytest.approx(lower_bound(flat, "allgather", size).bandwidth_s)
    assert "400 Gb/s" in rails.provenance.links["net"] and "spine" in rails.provenance.links


# --- a dump whose virtual bridges report x1 at 2.5 GT/s --------------------------------

def test_vm_dump_bridges_are_named_and_modelled_at_the_devices_speed():
    topo = nccl_xml.read(VM_DUMP)
    bridges = [w for w in topo.provenance.warnings if w.startswith("bridge ")]
    assert len(bridges) == 8
    for busid in ("0000:a1:00.0", "0000:e7:00.0"):
        line = next(w for w in bridges if w.startswith(f"bridge {busid} "))
        assert "2.5 GT/s PCIe x1 = 0.25 GB/s" in line and "modelled at 64 GB/s" in line
    assert gbps(topo, "pcie@0000:a1:00.0", "cpu0.write") == 64 == \
        gbps(topo, 0, "pcie@0000:a1:00.0")
    assert topo.route_bandwidth(0, 4) == 450e9  # NVSwitch: 5+5+4+4 NVLink4
    assert any("link_width 0 (unreported) on 16 device(s)" in w for w in topo.provenance.warnings)
    kept = nccl_xml.read(VM_DUMP, options=Options(keep_link_speeds=True))
    assert gbps(kept, "pcie@0000:a1:00.0", "cpu0") == 0.25  # too slow to need a memory link
    assert all("kept at the file's figure" in w for w in kept.provenance.warnings
               if w.startswith("bridge "))


def test_vm_dump_warnings_print_in_import_and_show(tmp_path, capsys):
    out = tmp_path / "vm.json"
    assert main(["topo", "import", str(VM_DUMP), "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("warning: bridge 0000:") for line in printed) == 8
    assert any(line.startswith("warning: bridge 0000:ab:00.0 ") for line in printed)  # no emoji
    assert main(["topo", "show", str(out)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("warning: bridge ") for line in shown) == 8
    assert any(line.startswith("pcie links from: the file's link_speed") for line in shown)
    assert any(line.startswith("nvlink links from: the dump's <nvlink") for line in shown)


def test_gpu_fabric_for_a_dump_is_refused():
    with pytest.raises(InputError, match="drop it"):
        nccl_xml.read(VM_DUMP, options=H100)


# --- second sources for the GPU fabric -------------------------------------------------

def test_fabric_from_a_dump_of_the_same_machine(tmp_path):
    tree = tmp_path / "tree.xml"
    tree.write_text(class_code_tree(VM_DUMP))
    from_dump = nccl_xml.read(tree, options=Options(gpu_fabric=(str(VM_DUMP),)))
    from_family = nccl_xml.read(tree, options=H100)
    assert [(lk.src, lk.dst, lk.bandwidth) for lk in from_dump.links] == \
        [(lk.src, lk.dst, lk.bandwidth) for lk in from_family.links]
    assert "matched by PCI bus id" in from_dump.provenance.links["nvlink"]
    other = tmp_path / "other.xml"
    other.write_text(VM_DUMP.read_text().replace("0000:a4:00.0", "0000:a5:00.0"))
    with pytest.raises(InputError, match=r"GPU 0000:a4:00\.0 of the PCI tree is not in the dump"):
        nccl_xml.read(tree, options=Options(gpu_fabric=(str(other),)))


def test_fabric_from_nvidia_smi_topo_matches_the_families(tmp_path):
    tree = tmp_path / "tree.xml"
    tree.write_text(class_code_tree(VM_DUMP))
    smi = str(FIXTURES / "nvidia_smi_topo_dgx_a100.txt")
    a100 = nccl_xml.read(tree, options=Options(gpu_fabric=(smi,), gpu="a100"))
    assert gbps(a100, 5, "nvswitch") == 300 and "read as an NVSwitch" in \
        a100.provenance.links["nvlink"]
    with pytest.raises(InputError, match="give --gpu"):
        nccl_xml.read(tree, options=Options(gpu_fabric=(smi,)))
    dgx1 = str(FIXTURES / "nvidia_smi_topo_dgx1.txt")
    mesh = nccl_xml.read(tree, options=Options(gpu_fabric=(dgx1,), gpu="v100"))
    family = nccl_xml.read(tree, options=Options(gpu_fabric=("v100-hybrid-mesh",)))
    nvlinks = sorted((lk.src, lk.dst, lk.bandwidth) for lk in mesh.links if lk.kind == "nvlink")
    assert nvlinks == sorted((lk.src, lk.dst, lk.bandwidth) for lk in family.links
                             if lk.kind == "nvlink")
    assert gbps(mesh, 0, 1) == 2 * 25
    assert not [lk for lk in mesh.links if (lk.src, lk.dst) == (0, 5)]


def nvlink_status(links_per_gpu: list[list[str]]) -> str:
    return "".join(f"GPU {g}: NVIDIA H100 80GB HBM3 (UUID: GPU-{g:08d})\n"
                   + "".join(f"\t Link {k}: {state}\n" for k, state in enumerate(links))
                   for g, links in enumerate(links_per_gpu))


def test_fabric_from_nvlink_status_refines_a_family(tmp_path):
    tree = tmp_path / "tree.xml"
    tree.write_text(class_code_tree(VM_DUMP))
    status = tmp_path / "nvlink-s.txt"
    links = [["26.562 GB/s"] * 18 for _ in range(8)]
    links[3][7] = "<inactive>"
    status.write_text(nvlink_status(links))
    topo = nccl_xml.read(tree, options=Options(gpu_fabric=("h100-nvswitch", str(status))))
    assert gbps(topo, 0, "nvswitch") == pytest.approx(18 * 26.562)
    assert gbps(topo, 3, "nvswitch") == pytest.approx(17 * 26.562)
    with pytest.raises(InputError, match="not where they lead"):
        nccl_xml.read(tree, options=Options(gpu_fabric=(str(status),)))
    with pytest.raises(InputError, match="give one"):
        nccl_xml.read(tree, options=Options(gpu_fabric=("a100-nvswitch", "h100-nvswitch")))
    with pytest.raises(InputError, match="both say how the GPUs are joined"):
        nccl_xml.read(tree, options=Options(gpu_fabric=("h100-nvswitch", str(VM_DUMP))))
    mesh = tmp_path / "mesh.txt"
    mesh.write_text(nvlink_status([["25 GB/s"] * (5 if g == 2 else 6) for g in range(8)]))
    with pytest.raises(InputError, match="GPU 2 has 5 active NVLinks"):
        nccl_xml.read(tree, options=Options(gpu_fabric=("v100-hybrid-mesh", str(mesh))))


# --- hwloc XML ---------------------------------------------------------------------------

def test_hwloc_reads_devices_numa_nodes_and_link_speeds_unchanged():
    topo = hwloc_xml.read(HWLOC_NVLINK)
    # two x16 Gen4 GPUs and a NIC per socket cannot outrun an EPYC's memory: no memory link
    assert topo.num_ranks == 4 and kinds(topo) == {"cpu": 2, "pcie": 6, "nic": 2}
    assert topo.groups["socket"] == ((0, 1), (2, 3))
    assert gbps(topo, 0, "pcie@0000:12:00.0") == 31.507692  # pci_link_speed, as written
    assert gbps(topo, "mlx5_1", "pcie@0000:91:00.0") == 31.507692  # NIC named by its RDMA device
    assert gbps(topo, 0, 3) == 100 and gbps(topo, 3, 0) == 100  # NVLinkBandwidth, MB/s
    assert gbps(topo, "cpu0", "cpu1") == 32  # AMD (CPUVendor AuthenticAMD)
    assert "display 0000:0a:00.0" in topo.source and "network 0000:0b:00.0" in topo.source
    with pytest.raises(InputError, match="drop --gpu-fabric"):
        hwloc_xml.read(HWLOC_NVLINK, options=H100)


def test_hwloc_without_nvml_needs_a_fabric(tmp_path):
    with pytest.raises(InputError, match="4 GPUs known by PCI class code only"):
        hwloc_xml.read(HWLOC_PCIE)
    topo = hwloc_xml.read(HWLOC_PCIE, options=Options(gpu_fabric=("a100-nvswitch",)))
    assert gbps(topo, 2, "nvswitch") == 300 and "a100-nvswitch" in topo.provenance.links["nvlink"]
    out = tmp_path / "h.json"
    assert main(["topo", "import", str(HWLOC_PCIE), "--gpu-fabric", "pcie-only", "-o",
                 str(out), "--json"]) == 0
    assert topology_io.load(out).num_ranks == 4


def test_hwloc_speed_zero_bridge_is_flagged_and_old_versions_refused(tmp_path):
    text = HWLOC_NVLINK.read_text().replace(
        'pci_busid="0000:11:00.0" pci_type="0604 [1000:c010] [1000:a064] b0 00" '
        'pci_link_speed="31.507692"',
        'pci_busid="0000:11:00.0" pci_type="0604 [1000:c010] [1000:a064] b0 00" '
        'pci_link_speed="0.000000"')
    topo = hwloc_xml.parse(text, source="vm.xml")
    warnings = [w for w in topo.provenance.warnings if w.startswith("bridge 0000:11:00.0 ")]
    assert len(warnings) == 1 and "modelled at 31.5077 GB/s" in warnings[0]
    assert gbps(topo, "pcie@0000:11:00.0", "cpu0") == 31.507692
    with pytest.raises(InputError, match=r"hwloc 1\.x"):
        hwloc_xml.parse(text.replace('<topology version="2.0">', "<topology>"), source="old.xml")


def test_import_detects_hwloc_by_its_root(tmp_path, capsys):
    out = tmp_path / "h.json"
    assert main(["topo", "import", str(HWLOC_NVLINK), "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "hwloc"


# --- every file, and generated variants: imports or one line ----------------------------

XML_FILES = sorted(FIXTURES.glob("*.xml")) + (sorted(SHARED.glob("*.xml")) if SHARED.exists()
                                              else [])


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("fabric", [(), ("h100-nvswitch",)])
def test_every_topology_file_imports_or_is_refused_in_one_line(path, fabric, tmp_path):
    module = hwloc_xml if hwloc_xml.looks_like_hwloc(path.read_text()) else nccl_xml
    for nodes, network in ((1, "switch"), (2, "rails")):
        try:
            topo = module.read(path, nodes=nodes, options=Options(fabric, network=network))
        except (InputError, TopologyError) as error:
            assert str(path) in one_line(error)
            continue
        topo.check_connected()
        topology_io.write(topo, tmp_path / "t.json")
        again = topology_io.load(tmp_path / "t.json")
        assert again.provenance == topo.provenance and again.num_ranks == topo.num_ranks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pci_trees(), st.booleans())
def test_generated_pci_trees_import_or_are_refused_in_one_line(tree, keep):
    text, facts = tree
    options = Options(("h100-nvswitch",), keep_link_speeds=keep)
    try:
        topo = nccl_xml.parse(text, source="tree.xml", options=options)
    except (InputError, TopologyError) as error:
        message = one_line(error)
        assert message.startswith("tree.xml")
        if facts["missing"]:
            assert f"lacks attribute {facts['missing']!r}" in message
        else:
            assert facts["gpus"] == 0
        return
    assert facts["missing"] is None  # every <pci> needs all four attributes, as NCCL's do
    assert topo.num_ranks == facts["gpus"]
    assert kinds(topo).get("nic", 0) == facts["nics"]
    bridges = [w for w in topo.provenance.warnings if w.startswith("bridge ")]
    assert len(bridges) == facts["slow_bridges"]
    assert all(("kept at the file's figure" in w) == keep for w in bridges)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pci_trees(nics=4))
def test_four_nics_per_node_join_on_rails(tree):
    text, facts = tree
    if facts["missing"] or not facts["gpus"]:
        return
    topo = nccl_xml.parse(text, source="tree.xml", nodes=3,
                          options=Options(("h100-nvswitch",), network="rails"))
    assert topo.num_ranks == 3 * facts["gpus"]
    rails = [f for f in topo.fabric if f.startswith("rail")]
    assert len(rails) == facts["nics"] == 4
    assert all(gbps(topo, rail, "spine") == 3 * 50 for rail in rails)


def test_provenance_round_trips_and_bad_fields_are_refused(tmp_path):
    topo = nccl_xml.read(VM_DUMP)
    data = topology_io.to_dict(topo)
    assert topology_io.from_dict(data).provenance == topo.provenance
    data["provenance"] = {"links": {"nvlink": 3}}
    with pytest.raises(TopologyError, match=r"provenance\.links must map link kinds to text"):
        topology_io.from_dict(data, "p.json")


PROVENANCE = topology_io.to_dict(nccl_xml.read(VM_DUMP))["provenance"]


@settings(max_examples=60, deadline=None)
@given(mutated(PROVENANCE))
def test_mutated_provenance_loads_or_is_refused_in_one_line(provenance):
    data = {**topology_io.to_dict(zoo.get("ring:4")), "provenance": provenance}
    try:
        topo = topology_io.from_dict(data, "p.json")
    except TopologyError as error:
        assert one_line(error).startswith("p.json: ")
        return
    assert topology_io.from_dict(topology_io.to_dict(topo)).provenance == topo.provenance
