"""PyTorch flight-recorder dumps (TORCH_NCCL_DUMP_ON_TIMEOUT / TORCH_FR_DUMP_TEMP_FILE), read safely.

A dump is one file per rank: a pickle (or, from _dump_nccl_trace_json / _dump_fr_trace_json, JSON) of
a dict {version, pg_config, pg_status, comm_lib_version, entries: [{record_id, pg_id, process_group,
collective_seq_id, p2p_seq_id, profiling_name, input_sizes, output_sizes, state, time_created_ns,
timeout_ms, ...}]}. Real dumps hold only builtin containers and primitives, so the unpickler refuses
every global: a pickle that names any class or function (the way code gets executed) is rejected.
"""

from __future__ import annotations

import io
import json
import pickle
import pickletools
from dataclasses import dataclass, field
from typing import Any, BinaryIO

MAX_DUMP_BYTES = 256 << 20
MAX_JSON_DUMP_BYTES = 64 << 20  # larger JSON is read as a log (JSON-lines)

# Pickle opcodes that build builtin containers and primitives. Anything else (GLOBAL, STACK_GLOBAL,
# REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID, ...) can construct arbitrary objects.
SAFE_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "MEMOIZE",
    "PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET",
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
    "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
    "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
    "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS", "FROZENSET",
})


class UnsafeDump(ValueError):
    """The file is a pickle that could run code, or not a flight-recorder dump at all."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise UnsafeDump(f"pickle references {module}.{name}; flight-recorder dumps never do, refusing to load it")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeDump("pickle uses persistent ids; refusing to load it")


def safe_unpickle(data: bytes) -> Any:
    """Load a pickle made only of builtin containers and primitives; raise UnsafeDump otherwise."""
    try:
        for opcode, _arg, _pos in pickletools.genops(data):
            if opcode.name not in SAFE_OPCODES:
                raise UnsafeDump(f"pickle opcode {opcode.name} can construct objects or run code; "
                                 "flight-recorder dumps never use it, refusing to load the file")
    except UnsafeDump:
        raise
    except Exception as exc:  # malformed stream
        raise UnsafeDump(f"not a readable pickle ({exc})") from None
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    except UnsafeDump:
        raise
    except Exception as exc:
        raise UnsafeDump(f"not a readable pickle ({exc})") from None


def is_pickle(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def is_json_dump(head: bytes) -> bool:
    """Might be a JSON dump (the caller still falls back to reading it as a log: JSON-lines logs look alike)."""
    return head.lstrip().startswith(b"{") and b'"entries"' in head


@dataclass
class Collective:
    pg: str
    seq: int
    op: str
    state: str
    sizes: list[Any]
    p2p: bool = False
    timeout_ms: int | None = None
    time_ns: int | None = None

    def describe(self) -> str:
        sizes = f" sizes {self.sizes}" if self.sizes else ""
        return f"{self.op} #{self.seq} ({self.state}){sizes}"


@dataclass
class DumpSummary:
    """What one rank's dump says: its last collectives per process group."""

    version: str
    pg_status: dict[str, dict[str, int]] = field(default_factory=dict)
    last: dict[str, Collective] = field(default_factory=dict)  # per pg: last entry
    first_pending: dict[str, Collective] = field(default_factory=dict)  # per pg: oldest not completed
    entries: int = 0
    comm_lib_version: str = ""
    source: str = ""


def read_dump(stream: BinaryIO, head: bytes) -> DumpSummary:
    """A pickle dump (raises UnsafeDump when it is not a safe, well-formed one)."""
    data = stream.read(MAX_DUMP_BYTES + 1)
    if len(data) > MAX_DUMP_BYTES:
        raise UnsafeDump(f"flight-recorder dump larger than {MAX_DUMP_BYTES >> 20} MiB, not read")
    return summarize(safe_unpickle(data))


def parse_json_dump(data: bytes) -> DumpSummary | None:
    """The summary of a JSON dump, or None when `data` is not one (e.g. a JSON-lines log)."""
    try:
        dump = json.loads(data)
    except ValueError:
        return None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return None
    return summarize(dump)


def summarize(dump: Any) -> DumpSummary:
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise UnsafeDump("not a flight-recorder dump (no 'entries' list)")
    summary = DumpSummary(version=str(dump.get("version", "?")),
                          comm_lib_version=str(dump.get("comm_lib_version") or dump.get("nccl_version") or ""))
    status = dump.get("pg_status") or {}
    if isinstance(status, dict):
        summary.pg_status = {str(k): {str(a): _int(b) for a, b in v.items()} for k, v in status.items()
                             if isinstance(v, dict)}
    completed = {pg: st.get("last_completed_collective", -1) for pg, st in summary.pg_status.items()}
    for raw in dump.get("entries") or []:
        if not isinstance(raw, dict):
            continue
        coll = _collective(raw)
        if not coll.p2p and coll.state != "completed" and 0 <= coll.seq <= completed.get(coll.pg, -1):
            coll.state = "completed"  # backends that do not track states (gloo) still report progress here
        summary.entries += 1
        summary.last[coll.pg] = coll
        if coll.state != "completed" and coll.pg not in summary.first_pending:
            summary.first_pending[coll.pg] = coll
    return summary


def _collective(raw: dict[str, Any]) -> Collective:
    pg = raw.get("process_group")
    pg_name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(raw.get("pg_id", "0"))
    p2p = bool(raw.get("is_p2p"))
    seq = _int(raw.get("p2p_seq_id") if p2p else raw.get("collective_seq_id"))
    name = str(raw.get("profiling_name", "?"))
    op = name.split(":", 1)[-1]
    return Collective(pg=pg_name, seq=seq, op=op, state=str(raw.get("state", "?")),
                      sizes=list(raw.get("input_sizes") or [])[:4], p2p=p2p,
                      timeout_ms=_int(raw.get("timeout_ms")) if raw.get("timeout_ms") is not None else None,
                      time_ns=_int(raw.get("time_created_ns")) if raw.get("time_created_ns") else None)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1
