"""`nccl-doctor topo` end to end (subprocess): saved matrices, fake sysfs trees, JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from test_topo_fakes import SMI, two_socket_node

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "src/nccl_doctor/render/report.schema.json").read_text())


def run_json(cli, *args: str, env: dict | None = None) -> tuple[int, dict]:
    proc = cli("topo", *args, "--json", env=env)
    assert proc.stderr == "", proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    return proc.returncode, data


def test_saved_matrix_with_a_far_gpu(cli, tmp_path):
    code, data = run_json(cli, "--smi-file", str(SMI / "h100_nv18_6nic_nccl1357.txt"), "--sysfs-root", str(tmp_path))
    assert code == 0 and data["verdict"] == "warning" and data["command"] == "topo"
    assert [f["cause"] for f in data["findings"]] == ["gpu-nic-far"]
    assert data["findings"][0]["category"] == "infiniband_roce"
    topo = data["facts"]["topology"]
    assert topo["source"] == "nvidia-smi topo -m (file)" and topo["matrix"]["GPU1"]["NIC0"] == "SYS"


def test_text_output_shows_the_matrix_and_findings(cli, tmp_path):
    proc = cli("topo", "--smi-file", str(SMI / "a100_nv12_10nic_readme.txt"), "--sysfs-root", str(tmp_path),
               env={"NCCL_IB_HCA": "mlx5_8,mlx5_9"})
    assert proc.returncode == 0, proc.stderr
    assert "GPU/NIC topology" in proc.stdout and "NV12" in proc.stdout and "NIC9=mlx5_9" in proc.stdout
    assert "nccl-doctor topo: 1 warning" in proc.stdout
    assert "[gpu-nic-far] NCCL_IB_HCA=mlx5_8,mlx5_9 leaves out mlx5_0, mlx5_1" in proc.stdout
    assert "hosts" not in proc.stdout  # a saved matrix may come from another host


def test_fake_tree_with_a_dead_port_and_xid_79(cli, tmp_path):
    host = two_socket_node(tmp_path)
    host.rdma("mlx5_2", "0000:04:00.0", {1: {"state": "1: DOWN", "phys": "3: Disabled"}})
    host.kern_log("kernel: NVRM: Xid (PCI:0000:81:00): 79, pid=7, GPU has fallen off the bus.")
    code, data = run_json(cli, "--sysfs-root", str(tmp_path), env={"NCCL_IB_HCA": "mlx5_2"})
    assert code == 1 and data["verdict"] == "error"
    assert data["findings"][0]["cause"] == "ib-port-down" and data["findings"][0]["severity"] == "error"
    assert {"gpu-xid", "gpu-nic-far", "pcie-degraded"} <= {f["cause"] for f in data["findings"]}
    assert data["facts"]["topology"]["matrix"]["GPU0"]["NIC0"] == "PIX"


def test_sampling_reports_deltas(cli, tmp_path):
    two_socket_node(tmp_path)
    code, data = run_json(cli, "--sysfs-root", str(tmp_path), "--sample", "0.2")
    assert data["facts"]["ib_counter_deltas"] == {"seconds": 0.2, "ports": ["mlx5_0/1", "mlx5_1/1"], "deltas": {}}


def test_stdin_smi_file(cli, tmp_path):
    proc = cli("topo", "--smi-file", "-", "--sysfs-root", str(tmp_path), "--json",
               input=(SMI / "k80_mlx4_soc_tensorflow_gdr.txt").read_text())
    assert json.loads(proc.stdout)["facts"]["topology"]["legend"] == "old"


def test_bad_inputs_give_one_line_and_exit_2(cli, tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    for args, words in (
        (["--smi-file", str(tmp_path / "missing.txt")], "cannot read --smi-file"),
        (["--smi-file", str(junk)], "no `nvidia-smi topo -m` matrix header"),
        (["--sysfs-root", str(tmp_path / "nowhere")], "is not a directory"),
        (["--sample", "-1"], "--sample"),
    ):
        proc = cli("topo", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr
        assert "Traceback" not in proc.stderr


def test_this_host_without_gpus(cli):
    code, data = run_json(cli)
    assert code in (0, 1) and set(data["facts"]) >= {"topology", "gpu_health", "fabric", "ib_ports", "pci", "xid"}
