"""The package's environment-variable data (catalog/nccl_env.tsv, torch_env.tsv) against the reference tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nccl_doctor.catalog.env_vars import READ_AS, STATUSES, env_vars, lookup, suggest, version_tuple

HERE = Path(__file__).parent
# The reference tables extracted from NCCL 2.30.7 and PyTorch sources; a copy travels with the tests.
REFERENCES = [p for p in (HERE.parents[1] / "shared" / "reference", HERE / "fixtures" / "env" / "reference")
              if (p / "nccl_env.tsv").exists()]


def reference_names(folder: Path, name: str) -> set[str]:
    names = set()
    for line in (folder / name).read_text().splitlines()[2:]:  # a comment line, then the header
        if line.startswith("#") or not line.strip():
            continue
        first = line.split("\t")[0].split(" ")[0]
        if re.fullmatch(r"[A-Z][A-Z0-9_]+", first):
            names.add(first)
    return names


@pytest.mark.parametrize("folder", REFERENCES, ids=str)
@pytest.mark.parametrize("table", ["nccl_env.tsv", "torch_env.tsv"])
def test_every_reference_variable_is_known(folder, table):
    names = reference_names(folder, table)
    assert len(names) > (250 if table == "nccl_env.tsv" else 50)
    missing = sorted(n for n in names if lookup(n) is None)
    assert not missing, f"variables of {folder / table} missing from the package data: {missing}"


def test_reference_aliases_are_known_too():
    for folder in REFERENCES:
        for line in (folder / "torch_env.tsv").read_text().splitlines()[2:]:
            aliases = line.split("\t")[1] if "\t" in line else ""
            for alias in re.findall(r"\b(?:TORCH|NCCL)_[A-Z0-9_]*[A-Z0-9]\b", aliases):
                assert lookup(alias), alias


def test_rows_are_consistent():
    table = env_vars()
    assert len(table) > 330
    for var in table.values():
        assert var.status in STATUSES and var.read_as in READ_AS
        if var.read_as in ("enum", "enum-nocase", "level", "algo", "proto", "flags"):
            assert var.values, var.name
        if var.status == "removed" and var.is_nccl:
            assert var.removed_in or var.meaning, var.name
        if var.replacement:
            assert lookup(var.replacement_name), (var.name, var.replacement)
        for text in (var.since, var.deprecated_in, var.removed_in):
            assert not text or version_tuple(text), (var.name, text)
        if var.min is not None and var.max is not None:
            assert var.min <= var.max


def test_key_facts():
    assert lookup("NCCL_IB_RETRY_CNT").max == 7
    assert lookup("NCCL_IB_MTU").status == "not-read"
    assert lookup("NCCL_IBEXT_DISABLE").status == "plugin"
    assert lookup("NCCL_MAX_NCHANNELS").replacement == "NCCL_MAX_CTAS"
    assert lookup("NCCL_ASYNC_ERROR_HANDLING").replacement == "TORCH_NCCL_ASYNC_ERROR_HANDLING"
    assert lookup("NCCL_P2P_LEVEL").read_as == "level"
    assert lookup("GLOO_SOCKET_IFNAME").read_as == "gloo-ifname"


@pytest.mark.parametrize("typo, meant", [("NCCL_DEBG", "NCCL_DEBUG"), ("NCCL_SOCKET_IFACE", "NCCL_SOCKET_IFNAME"),
                                         ("NCCL_IB_HCAS", "NCCL_IB_HCA"), ("NCCL_P2P_DISABLED", "NCCL_P2P_DISABLE"),
                                         ("nccl_debug", "NCCL_DEBUG")])
def test_did_you_mean(typo, meant):
    assert suggest(typo) == [meant]
