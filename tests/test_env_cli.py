"""`nccl-doctor env` through a subprocess: text sections, JSON contract, secrets, bad flags."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

SCHEMA = json.loads((Path(__file__).parents[1] / "src" / "nccl_doctor" / "render" / "report.schema.json").read_text())
SECRETS = {"HF_TOKEN": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "TORCH_HUB_TOKEN": "plain-but-named-secret",
           "NCCL_DEBUG": "INFO", "MASTER_ADDR": "https://trainer:hunter2hunter2@10.0.0.1", "MASTER_PORT": "29500",
           "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567"}


def test_env_text_sections(cli):
    r = cli("env", env=SECRETS)
    assert r.returncode == 0, r.stderr
    for title in ("Host", "Software", "GPUs", "Network", "InfiniBand / RoCE", "Limits", "Environment"):
        assert f"\n{title}" in r.stdout, title
    assert "NCCL would use" in r.stdout and "open files (ulimit -n)" in r.stdout
    assert "NCCL_DEBUG" in r.stdout and "TORCH_HUB_TOKEN" in r.stdout


def test_env_json_contract(cli):
    r = cli("env", "--json", env=SECRETS)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["command"] == "env" and report["findings"] == [] and report["verdict"] == "ok"
    facts = report["facts"]
    assert set(facts) == {"host", "software", "gpus", "network", "infiniband", "limits", "environment"}
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
