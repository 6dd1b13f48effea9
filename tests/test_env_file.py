"""The --env-file parser (KEY=VALUE, export, quotes, comments) and the NCCL config-file reader."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_doctor.probe.environment import (EnvFileError, parse_env_text, parse_nccl_conf, read_conf, read_env_file,
                                           with_conf)

SAMPLE = """\
# launcher environment
export NCCL_DEBUG=INFO
NCCL_SOCKET_IFNAME=ens1f0   # the data network

MASTER_ADDR='10.1.0.10'
TORCH_NCCL_DUMP_ON_TIMEOUT="1"
EMPTY=
  export   SPACED = "a b"  
GREETING="say \\"hi\\"\\n"
HASH=value#not-a-comment
"""


def test_sample_file():
    env = parse_env_text(SAMPLE, "job.env")
    assert dict(env) == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ens1f0", "MASTER_ADDR": "10.1.0.10",
                         "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "EMPTY": "", "SPACED": "a b", "GREETING": 'say "hi"\n',
                         "HASH": "value#not-a-comment"}
    assert env.where("NCCL_SOCKET_IFNAME") == ("job.env", 3)
    assert env.where("MASTER_ADDR") == ("job.env", 5)


@pytest.mark.parametrize("line, problem", [
    ("NCCL_DEBUG", "not a KEY=VALUE line"),
    ("1NCCL=x", "not a KEY=VALUE line"),
    ("NCCL DEBUG=INFO", "not a KEY=VALUE line"),
    ("X='unterminated", "unterminated single quote"),
    ('X="unterminated', "unterminated double quote"),
    ("X='a' trailing", "unexpected text after the closing quote"),
])
def test_malformed_lines_name_file_and_line(line, problem):
    with pytest.raises(EnvFileError) as err:
        parse_env_text(f"# ok\nA=1\n{line}\n", "launch.env")
    assert str(err.value).startswith("launch.env:3: ") and problem in str(err.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(EnvFileError, match="no such file"):
        read_env_file(str(tmp_path / "missing.env"))
    with pytest.raises(EnvFileError, match="is a directory"):
        read_env_file(str(tmp_path))
    binary = tmp_path / "bin.env"
    binary.write_bytes(b"A=1\n\x00\x01\x02")
    with pytest.raises(EnvFileError, match="binary file"):
        read_env_file(str(binary))
    latin = tmp_path / "latin.env"
    latin.write_bytes(b"A=caf\xe9\n")
    with pytest.raises(EnvFileError, match="not UTF-8"):
        read_env_file(str(latin))
    huge = tmp_path / "huge.env"
    huge.write_bytes(b"A=" + b"x" * (1024 * 1024 + 10))
    with pytest.raises(EnvFileError, match="larger than"):
        read_env_file(str(huge))


KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=8), st.booleans())
def test_round_trip_through_single_quotes(values, export):
    """What a shell would export with shlex.quote (single quotes) reads back unchanged."""
    lines = [f"{'export ' if export else ''}{k}={_single_quoted(v)}" for k, v in values.items()]
    assert dict(parse_env_text("\n".join(lines), "f")) == values


def _single_quoted(value: str) -> str:
    if "'" in value:  # shlex's '"'"' trick is shell syntax; use double quotes with escapes instead
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return shlex.quote(value) if value else "''"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_parser_never_raises_anything_but_env_file_error(text):
    try:
        parse_env_text(text, "f")
    except EnvFileError as exc:
        assert str(exc).startswith("f:")


def test_nccl_conf_is_read_like_nccl_does():
    entries = parse_nccl_conf("# comment\nNCCL_DEBUG=INFO\nNCCL_IB_HCA = mlx5_0\nexport NCCL_P2P_LEVEL=NVL\n"
                              "no equals here\nNCCL_SOCKET_IFNAME=\"eth0\"\n\nNCCL_ALGO=a=b\n")
    named = [(e["line"], e["name"], e["value"]) for e in entries if "name" in e]
    assert named == [(2, "NCCL_DEBUG", "INFO"), (3, "NCCL_IB_HCA ", " mlx5_0"), (4, "export NCCL_P2P_LEVEL", "NVL"),
                     (6, "NCCL_SOCKET_IFNAME", '"eth0"'), (8, "NCCL_ALGO", "a=b")]
    assert {"line": 5, "ignored": "no '=' on the line"} in entries


def test_conf_files_order_and_precedence(tmp_path):
    user, system = tmp_path / "user.conf", tmp_path / "system.conf"
    user.write_text("NCCL_DEBUG=INFO\nNCCL_IB_HCA=mlx5_0\n")
    system.write_text("NCCL_DEBUG=WARN\nNCCL_GRAPH_FILE=/opt/graph.xml\n")
    confs = [read_conf("NCCL_CONF_FILE", str(user)), read_conf("/etc/nccl.conf", str(system))]
    effective = with_conf({"NCCL_IB_HCA": "mlx5_1"}, confs)
    assert effective == {"NCCL_IB_HCA": "mlx5_1", "NCCL_DEBUG": "INFO", "NCCL_GRAPH_FILE": "/opt/graph.xml"}
    assert read_conf("x", str(tmp_path / "absent"))["exists"] is False
    (tmp_path / "bin.conf").write_bytes(b"\x00\x01")
    assert "binary" in read_conf("x", str(tmp_path / "bin.conf"))["unavailable"]
