"""The environment that matters for NCCL, PyTorch and the launcher, with secrets redacted.

Only variables with a relevant name are shown at all (NCCL_*, TORCH_*, MASTER_*, SLURM_*, ...), and even then a
value is replaced when the name says it is a secret (HF_TOKEN, *_PASSWORD, ...) or the value looks like one
(a URL with credentials, an AWS key id, a GitHub/Hugging Face/OpenAI token, a JWT, a long random string):
nccl_doctor/redact.py decides.
Also reads the NCCL configuration files (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf) exactly as NCCL
does, so rules can judge them like the environment.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping
from typing import Any

from ..redact import redact

RELEVANT_PREFIXES = (
    "NCCL_", "TORCH_", "TORCHELASTIC_", "PET_", "GLOO_", "MASTER_", "SLURM_", "OMPI_", "PMI_", "PMIX_RANK",
    "CUDA_", "NVIDIA_", "UCX_", "FI_", "RDMAV_", "PYTORCH_", "ROLE_", "GROUP_",
)
RELEVANT_NAMES = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "OMP_NUM_THREADS", "USE_LIBUV", "ENABLE_NCCL_HEALTH_CHECK", "KUBERNETES_SERVICE_HOST", "HOSTNAME",
})


def relevant(name: str) -> bool:
    return name in RELEVANT_NAMES or name.startswith(RELEVANT_PREFIXES)


def relevant_env(env: Mapping[str, str]) -> dict[str, str]:
    """The relevant variables of `env`, sorted by name, secrets redacted."""
    return {name: redact(name, env[name]) for name in sorted(env) if relevant(name)}


# ------------------------------------------------------------------ NCCL configuration files

MAX_CONF_BYTES = 256 * 1024


def conf_paths(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(origin, path) of the files NCCL reads, in NCCL's order: NCCL_CONF_FILE (or ~/.nccl.conf), /etc/nccl.conf.

    NCCL finds the home directory with getpwuid(getuid()), not $HOME; earlier files win (setenv without
    overwrite) and the environment wins over all of them.
    """
    user_file = env.get("NCCL_CONF_FILE", "")
    if user_file:
        first = ("NCCL_CONF_FILE", user_file)
    else:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = env.get("HOME", "")
        first = ("~/.nccl.conf", os.path.join(home, ".nccl.conf")) if home else None
    return [p for p in (first, ("/etc/nccl.conf", "/etc/nccl.conf")) if p]


def parse_nccl_conf(text: str) -> list[dict[str, Any]]:
    """Entries of an NCCL config file as NCCL's setEnvFile reads them.

    NCCL skips lines starting with '#' and lines without '='; the name is everything before the first '='
    and the value everything after it, untrimmed and with quotes kept (so `NCCL_DEBUG = INFO` sets a
    variable named 'NCCL_DEBUG ' and `export X=1` one named 'export X').
    """
    entries = []
    for number, line in enumerate(text.split("\n"), 1):  # getline(): only '\n' ends a line, '\r' stays
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            entries.append({"line": number, "ignored": "no '=' on the line"})
            continue
        entries.append({"line": number, "name": name[:1023], "value": value[:1023]})
    return entries


def read_conf(origin: str, path: str) -> dict[str, Any]:
    info: dict[str, Any] = {"origin": origin, "path": path}
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONF_BYTES + 1)
    except FileNotFoundError:
        return {**info, "exists": False}
    except OSError as exc:
        return {**info, "exists": True, "unavailable": f"cannot read: {exc.strerror or exc}"}
    if len(data) > MAX_CONF_BYTES:
        return {**info, "exists": True, "unavailable": f"larger than {MAX_CONF_BYTES} bytes, not read"}
    if b"\0" in data:
        return {**info, "exists": True, "unavailable": "binary file, not read"}
    return {**info, "exists": True, "entries": parse_nccl_conf(data.decode("utf-8", "replace"))}


MAX_XML_BYTES = 4 * 1024 * 1024
XML_DEVICE = re.compile(r'<(gpu|net)\b[^>]*?\bdev="(\d+)"')


def xml_devices(path: str) -> dict[str, list[int]]:
    """The GPU and NET device indices a topology or graph XML file refers to (<gpu dev="N">, <net dev="N">)."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_XML_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    found: dict[str, set[int]] = {"gpu": set(), "net": set()}
    for kind, dev in XML_DEVICE.findall(text):
        found[kind].add(int(dev))
    return {f"{kind}_devs": sorted(devs) for kind, devs in found.items()}


def referenced_files(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The files NCCL's file variables name: whether they exist and, for XML, which devices they refer to."""
    files = {}
    for name in ("NCCL_TOPO_FILE", "NCCL_GRAPH_FILE", "NCCL_CONF_FILE"):
        path = env.get(name)
        if path:
            info: dict[str, Any] = {"path": redact(name, path), "exists": os.path.isfile(path)}
            if info["exists"] and name != "NCCL_CONF_FILE":
                info.update(xml_devices(path))
            files[name] = info
    return files


def with_conf(env: Mapping[str, str], confs: list[dict[str, Any]]) -> dict[str, str]:
    """The variables NCCL sees: the environment, then each config file in order, earlier sources winning."""
    effective = dict(env)
    for conf in confs:
        for entry in conf.get("entries", ()):
            if "name" in entry:
                effective.setdefault(entry["name"], entry["value"])
    return effective


def _redacted(conf: dict[str, Any]) -> dict[str, Any]:
    if "entries" not in conf:
        return conf
    entries = [{**e, "value": redact(e["name"], e["value"])} if "name" in e else e for e in conf["entries"]]
    return {**conf, "entries": entries}


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    confs = [read_conf(origin, path) for origin, path in conf_paths(env)]
    return {
        "variables": relevant_env(env),
        "nccl_conf": [_redacted(c) for c in confs],
        "files": referenced_files(with_conf(env, confs)),
    }


# ------------------------------------------------------------------ KEY=VALUE files (--env-file)

class SourcedEnv(dict):
    """Variables that remember where each came from (a file and line), for evidence in findings."""

    def __init__(self, values: Mapping[str, str] | None = None, source: str = "environment",
                 lines: Mapping[str, int] | None = None) -> None:
        super().__init__(values or {})
        self.source = source
        self.lines = dict(lines or {})

    def where(self, name: str) -> tuple[str, int | None]:
        return self.source, self.lines.get(name)


MAX_ENV_FILE_BYTES = 1024 * 1024
ENV_LINE = re.compile(r"\s*(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*?)\s*")
DOUBLE_QUOTE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$", "`": "`"}


class EnvFileError(ValueError):
    """A file that cannot be read as KEY=VALUE lines; the message names file:line and what to do."""


def _unquote(raw: str) -> str:
    """The value of a KEY=VALUE line: 'single' literal, "double" with backslash escapes, bare up to ' #'."""
    if raw[:1] == "'":
        end = raw.find("'", 1)
        if end < 0:
            raise ValueError("unterminated single quote")
        rest, value = raw[end + 1:], raw[1:end]
    elif raw[:1] == '"':
        chars, i = [], 1
        while i < len(raw) and raw[i] != '"':
            if raw[i] == "\\" and i + 1 < len(raw):
                i += 1
                chars.append(DOUBLE_QUOTE_ESCAPES.get(raw[i], "\\" + raw[i]))
            else:
                chars.append(raw[i])
            i += 1
        if i >= len(raw):
            raise ValueError("unterminated double quote")
        rest, value = raw[i + 1:], "".join(chars)
    else:
        return re.split(r"\s+#", raw, maxsplit=1)[0].rstrip()
    if rest.strip() and not rest.lstrip().startswith("#"):
        raise ValueError(f"unexpected text after the closing quote: {rest.strip()[:40]!r}")
    return value


def parse_env_text(text: str, source: str) -> SourcedEnv:
    """KEY=VALUE lines: `export KEY=VALUE`, quotes, comments and blank lines; raises EnvFileError on a bad line."""
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = ENV_LINE.fullmatch(line)
        if not m:
            raise EnvFileError(f"{source}:{number}: not a KEY=VALUE line: {stripped[:60]!r}")
        try:
            values[m["key"]] = _unquote(m["value"])
        except ValueError as exc:
            raise EnvFileError(f"{source}:{number}: {exc}") from None
        lines[m["key"]] = number
    return SourcedEnv(values, source, lines)


def read_env_file(path: str) -> SourcedEnv:
    """Read a launcher env / .env file; every problem is one EnvFileError line naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_ENV_FILE_BYTES + 1)
    except FileNotFoundError:
        raise EnvFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise EnvFileError(f"{path}: is a directory, expected a KEY=VALUE file") from None
    except OSError as exc:
        raise EnvFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_ENV_FILE_BYTES:
        raise EnvFileError(f"{path}: larger than {MAX_ENV_FILE_BYTES // 1024} KiB, not an environment file")
    if b"\0" in data:
        raise EnvFileError(f"{path}: binary file, expected KEY=VALUE lines")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_env_text(text, path)
