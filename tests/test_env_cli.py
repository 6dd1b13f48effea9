"""`nccl-doctor env` through a subprocess: text sections, JSON contract, secrets, bad flags."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema

from nccl_doctor.render.env import render_facts
from nccl_doctor.probe import infiniband
from nccl_doctor.probe.hardware import hardware_facts
from test_topo_fakes import FakeNVML, hgx_gpu, two_socket_node

FIXTURES = Path(__file__).parent / "fixtures" / "env"

SCHEMA = json.loads((Path(__file__).parents[1] / "src" / "nccl_doctor" / "render" / "report.schema.json").read_text())
SECRETS = {"HF_TOKEN": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "TORCH_HUB_TOKEN": "plain-but-named-secret",
           "NCCL_DEBUG": "INFO", "MASTER_ADDR": "https://trainer:hunter2hunter2@10.0.0.1", "MASTER_PORT": "29500",
           "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567"}


def test_env_text_sections(cli):
    r = cli("env", env=SECRETS)
    assert r.returncode == 0, r.stderr
    for title in ("Host", "Software", "GPUs", "Network", "InfiniBand / RoCE", "Hardware", "Limits", "Environment"):
        assert f"\n{title}" in r.stdout, title
    assert "NCCL would use" in r.stdout and "open files (ulimit -n)" in r.stdout
    assert "NCCL_DEBUG" in r.stdout and "TORCH_HUB_TOKEN" in r.stdout
    hardware = r.stdout.split("\nHardware")[1].split("\nLimits")[0]
    for row in ("topology", "NVSwitch", "Xid events"):
        assert f"\n  {row}" in hardware, row


def test_env_json_contract(cli):
    r = cli("env", "--json", env=SECRETS)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["command"] == "env" and report["findings"] == [] and report["verdict"] == "ok"
    facts = report["facts"]
    assert set(facts) == {"host", "software", "gpus", "network", "infiniband", "limits", "environment", "hardware"}
    assert set(facts["hardware"]) == {"topology", "gpu_health", "fabric", "pci", "xid"}
    assert facts["environment"]["variables"]["NCCL_DEBUG"] == "INFO"
    assert facts["environment"]["variables"]["TORCH_HUB_TOKEN"] == "<redacted>"
    assert "HF_TOKEN" not in facts["environment"]["variables"]
    assert facts["network"]["master"]["port"] == "29500"


def test_env_never_prints_secrets(cli):
    for args in (("env",), ("env", "--json")):
        out = cli(*args, env=SECRETS).stdout
        for secret in ("aBcDeFgHiJkLmN", "plain-but-named-secret", "hunter2hunter2", "0123456789abcdef0123"):
            assert secret not in out, (args, secret)


def test_env_bad_flag(cli):
    r = cli("env", "--bogus")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_env_text_summarises_a_gpu_hosts_hardware(tmp_path):
    """The hardware part of `env` on a GPU/IB host (a fake tree and NVML; this machine has neither)."""
    two_socket_node(tmp_path)
    nvml = FakeNVML([hgx_gpu(0, bus_id="00000000:03:00.0", temp=86),
                     hgx_gpu(1, bus_id="00000000:05:00.0", pcie=(5, 5, 8, 16)),
                     hgx_gpu(2, bus_id="00000000:81:00.0", down=(0, 1))])
    facts = json.loads((FIXTURES / "facts_8gpu_ib.json").read_text())
    facts["infiniband"] = infiniband.read_devices(tmp_path)
    facts["hardware"] = hardware_facts(tmp_path, nvml=nvml, ib=facts["infiniband"], detail=False)
    del facts["hardware"]["ib_ports"]
    out = io.StringIO()
    render_facts(facts, {}, 0.1, out)
    text = out.getvalue()
    hardware = text.split("\nHardware")[1].split("\nLimits")[0]
    assert "3 GPUs, 2 RDMA NICs (sysfs PCI tree + NVML NVLink)" in hardware
    assert "GPU0 mlx5_0 PIX, GPU1 mlx5_0/mlx5_1 PHB, GPU2 mlx5_0/mlx5_1 SYS" in hardware
    assert "GPU pairs     NV16 x2, NV18 x1" in hardware
    assert "Gen5/5 x8/16" in hardware and "16/18" in hardware and "86 C" in hardware
    assert "mlx5_1" in text.split("\nInfiniBand / RoCE")[1] and "uverbs0, uverbs1" in text
