"""`nvidia-smi topo -m` parsing: real outputs from public threads (fixtures/topo/smi) and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_doctor.probe.topology import distance_rank, parse_smi_topo, pci_distance, PciNode
from test_topo_fakes import SMI


def parse(name: str) -> dict:
    return parse_smi_topo((SMI / name).read_text())


def test_h100_with_nics_and_gpu_numa_column():
    topo = parse("h100_nv18_9nic_nccl1453.txt")
    assert topo["gpus"] == [f"GPU{i}" for i in range(8)]
    assert list(topo["nics"]) == [f"NIC{i}" for i in range(9)]
    assert topo["matrix"]["GPU0"]["NIC8"] == "PIX" and topo["matrix"]["GPU7"]["NIC1"] == "PIX"
    assert topo["matrix"]["GPU3"]["GPU5"] == "NV18"
    assert topo["affinity"]["GPU4"] == {"cpu": "80-159", "numa": "1", "gpu_numa_id": None}
    # the excerpt stops after NIC5: the missing NIC rows are flagged and filled from the GPU columns
    assert topo["incomplete"] == ["NIC6", "NIC7", "NIC8"]
    assert topo["matrix"]["NIC8"]["GPU0"] == "PIX"


def test_ansi_underlined_header_parses_like_the_plain_one():
    plain, ansi = parse("h100_nv18_9nic_nccl1453.txt"), parse("h100_ansi_underlined_derived.txt")
    assert ansi == plain


def test_nic_legend_names_the_columns():
    topo = parse("a100_nv12_10nic_readme.txt")
    assert topo["nics"]["NIC9"] == "mlx5_9" and topo["legend"] == "current"
    assert topo["matrix"]["GPU6"]["NIC7"] == "PXB" and topo["incomplete"] == []
    assert topo["affinity"]["GPU2"] == {"cpu": "16-31,144-159", "numa": "1"}


def test_old_driver_soc_and_device_name_columns():
    topo = parse("k80_mlx4_soc_tensorflow_gdr.txt")
    assert topo["legend"] == "old"
    assert topo["nics"] == {"mlx4_0": "mlx4_0"}
    assert topo["matrix"]["GPU0"]["GPU2"] == "SYS"  # SOC is read as SYS
    assert topo["matrix"]["GPU3"]["mlx4_0"] == "PHB"
    assert topo["affinity"]["GPU2"] == {"cpu": "6-11"}


def test_space_separated_paste_with_device_name_columns():
    topo = parse("dgx1v_mlx5_nccltests29.txt")
    assert topo["nics"] == {"mlx5_0": "mlx5_0", "mlx5_1": "mlx5_1"}
    assert topo["matrix"]["GPU2"]["mlx5_1"] == "PIX" and topo["matrix"]["GPU0"]["GPU4"] == "NV1"
    assert topo["matrix"]["mlx5_0"]["GPU5"] == "SYS"  # no NIC rows in the excerpt: filled symmetrically


def test_pcie_only_machines_without_nics():
    for name, cell in (("t4_pcie_nccl428.txt", "SYS"), ("rtx_2gpu_phb_club3090.txt", "PHB"),
                       ("a6000_nvlink_bridge_siboehm.txt", "NV4")):
        topo = parse(name)
        assert topo["nics"] == {} and topo["matrix"]["GPU0"]["GPU1"] == cell


def test_row_cut_in_the_middle_is_flagged():
    topo = parse("h100_nv18_6nic_nccl1357.txt")
    assert "GPU7" in topo["incomplete"]
    assert topo["matrix"]["GPU1"]["NIC0"] == "SYS" and topo["matrix"]["GPU7"]["GPU0"] == "NV18"


def test_terminal_copy_that_lost_the_header_tabs():
    text = ("\t    GPU0GPU1GPU2mlx5_0\tCPU Affinity\n"
            "GPU0\t X \tNV1\tSOC\tPIX\t1-1\nGPU1\tNV1\t X \tSOC\tPIX\t1-1\nGPU2\tSOC\tSOC\t X \tSOC\t1-1\n")
    topo = parse_smi_topo(text)
    assert topo["gpus"] == ["GPU0", "GPU1", "GPU2"] and topo["nics"] == {"mlx5_0": "mlx5_0"}
    assert topo["matrix"]["GPU1"]["mlx5_0"] == "PIX"


def test_single_gpu():
    topo = parse_smi_topo("\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-7\t0\t\tN/A\n")
    assert topo["gpus"] == ["GPU0"] and topo["matrix"]["GPU0"] == {}


@pytest.mark.parametrize("text", [
    "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    "GPU0 X SYS\n", "just some log\nwith lines\n",
])
def test_text_without_a_matrix_is_rejected(text):
    with pytest.raises(ValueError, match="no `nvidia-smi topo -m` matrix header"):
        parse_smi_topo(text)


def test_distance_order():
    ranked = sorted(["SYS", "PIX", "NV18", "NODE", "PHB", "PXB", "SOC", "X"], key=distance_rank)
    assert ranked == ["X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC"]


def test_pci_distance_classes():
    def node(host, *chain, numa=0):
        return PciNode(chain[-1], host, chain, numa)
    gpu = node("pci0000:00", "00:01.0", "01:00.0", "02:08.0", "03:00.0")
    assert pci_distance(gpu, node("pci0000:00", "00:01.0", "01:00.0", "02:10.0", "04:00.0")) == "PIX"
    assert pci_distance(gpu, node("pci0000:00", "00:01.0", "01:00.0", "02:10.0", "05:00.0", "06:00.0", "07:00.0")) == "PXB"
    assert pci_distance(gpu, node("pci0000:00", "00:02.0", "08:00.0")) == "PHB"
    assert pci_distance(gpu, node("pci0000:20", "20:01.0", "21:00.0")) == "NODE"
    assert pci_distance(gpu, node("pci0000:80", "80:01.0", "81:00.0", numa=1)) == "SYS"
    assert pci_distance(gpu, node("pci0000:80", "80:01.0", "81:00.0", numa=None)) == "NODE"


# ---------------------------------------------------------------- properties

CELLS = st.sampled_from(["PIX", "PXB", "PHB", "NODE", "SYS", "NV1", "NV4", "NV12", "NV18"])


@st.composite
def matrices(draw):
    n_gpu = draw(st.integers(1, 8))
    n_nic = draw(st.integers(0, 4))
    labels = [f"GPU{i}" for i in range(n_gpu)] + [f"NIC{i}" for i in range(n_nic)]
    cells = {}
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            cell = draw(CELLS)
            if not (a.startswith("GPU") and b.startswith("GPU")) and cell.startswith("NV"):
                cell = "SYS"
            cells[(a, b)] = cells[(b, a)] = cell
    return labels, cells, draw(st.booleans()), draw(st.booleans()), draw(st.booleans())


def render(labels, cells, tabs, ansi, legend):
    """Lay a matrix out as nvidia-smi does (tabs, ' X ' diagonal) or as a space-aligned paste."""
    sep = "\t" if tabs else "    "
    head = sep.join(labels + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    lines = [sep + (f"\x1b[4m{head}\x1b[0m" if ansi else head)]
    for a in labels:
        row = [" X " if a == b else cells[(a, b)] for b in labels]
        tail = ["0-15", "0", "", "N/A"] if a.startswith("GPU") else []
        lines.append(sep.join([a, *row, *tail]))
    if legend:
        lines += ["", "Legend:", "", "  X    = Self", "  SYS  = Connection traversing PCIe as well as the SMP interconnect",
                  "", "NIC Legend:", ""] + [f"  {l}: mlx5_{l[3:]}" for l in labels if l.startswith("NIC")]
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(matrices())
def test_parse_recovers_every_cell(case):
    labels, cells, tabs, ansi, legend = case
    topo = parse_smi_topo(render(labels, cells, tabs, ansi, legend))
    assert topo["gpus"] + list(topo["nics"]) == labels
    assert topo["incomplete"] == []
    for (a, b), cell in cells.items():
        assert topo["matrix"][a][b] == cell
    if legend:
        assert all(name == f"mlx5_{label[3:]}" for label, name in topo["nics"].items())
    assert all(topo["affinity"][g]["cpu"] == "0-15" for g in topo["gpus"])


@settings(max_examples=150, deadline=None)
@given(matrices(), st.data())
def test_cut_pastes_never_crash_and_never_invent_cells(case, data):
    labels, cells, tabs, ansi, legend = case
    text = render(labels, cells, tabs, ansi, legend)
    cut = data.draw(st.integers(text.index("\n") + 1, len(text)))
    topo = parse_smi_topo(text[:cut])
    for a, row in topo["matrix"].items():
        for b, cell in row.items():
            assert cell == cells[(a, b)]


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_parses_or_raises_value_error(text):
    try:
        parse_smi_topo(text)
    except ValueError:
        pass
