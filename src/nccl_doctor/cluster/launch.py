"""Who am I in the job: world info from torchrun, SLURM, mpirun or plain env, and the `--local N` spawner.

Every launcher says the same four things differently (rank, world size, local rank, where rank 0's
store listens); `detect_world` reads them into one `World`. `LocalRanks` starts N rank processes on
this host and guarantees that every one of them is reaped, whatever happens to the parent: it ends them
itself, and when it dies without doing so (SIGKILL, OOM), each child sees the end of a pipe only the
parent held open (`watch_parent`) and ends itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from ..roads import emits

DEFAULT_PORT = 29500
PARENT_FD = "NCCL_DOCTOR_PARENT_FD"  # a --local child's end of the pipe whose other end only its parent holds
ORPHAN_GRACE = 2.0  # seconds an orphaned --local child gets to end cleanly before it kills its process group
LAUNCHER_PREFIXES = ("TORCHELASTIC_", "GROUP_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_", "PMI_RANK")
SLURM_PORT_BASE = 15000  # SLURM: 15000 + last 4 digits of the job id, as PyTorch Lightning derives it


@dataclass(frozen=True)
class World:
    """One rank's view of the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str  # torchrun | slurm | mpirun | env | local
    agent_store: bool = False  # torchrun's agent hosts the store at MASTER_ADDR:PORT: every rank is a client
    run_id: str = "job"  # namespaces our keys inside a store shared with the launcher

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


class WorldError(Exception):
    """The launcher's environment is inconsistent; carries the catalog cause that explains it."""

    def __init__(self, cause: str, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.cause, self.fix = cause, fix


def detect_world(env: Mapping[str, str]) -> World | None:
    """Read the launcher's variables; None when no launcher started this process."""
    if "TORCHELASTIC_RUN_ID" in env or "GROUP_RANK" in env:
        return _from_torchrun(env)
    if "RANK" in env and "WORLD_SIZE" in env:
        return _from_vars(env, "env", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return _from_slurm(env)
    if "OMPI_COMM_WORLD_RANK" in env:
        return _from_vars(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", need_master=True)
    if "PMI_RANK" in env and "PMI_SIZE" in env:  # MPICH, Intel MPI
        return _from_vars(env, "mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                          need_master=True)
    return None


def _from_torchrun(env: Mapping[str, str]) -> World:
    base = _from_vars(env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    run = f"{env.get('TORCHELASTIC_RUN_ID', 'none')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return World(**{**base.__dict__, "agent_store": env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
                    "run_id": f"torchrun/{run}"})


@emits("master-port-invalid", "rank-config-invalid")
def _from_slurm(env: Mapping[str, str]) -> World:
    """The world SLURM describes (srun/sbatch variables, the node list expanded); inconsistent values are
    rank-config-invalid."""
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "")
    derived = dict(env)
    if "MASTER_ADDR" not in env:
        hosts = expand_hostlist(nodelist)
        if not hosts:
            raise WorldError("rank-config-invalid", "SLURM_NODELIST is empty: cannot tell which host runs rank 0",
                             "Set MASTER_ADDR to rank 0's host, or run inside an allocation (salloc/sbatch).")
        derived["MASTER_ADDR"] = hosts[0]
    if "MASTER_PORT" not in env and env.get("SLURM_JOB_ID", "").isdigit():
        derived["MASTER_PORT"] = str(slurm_port(env["SLURM_JOB_ID"]))
    derived.setdefault("SLURM_LOCAL_SIZE", str(_slurm_tasks_on_first_node(env)))
    world = _from_vars(derived, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_LOCAL_SIZE")
    return World(**{**world.__dict__, "run_id": f"slurm/{env.get('SLURM_JOB_ID', '0')}/{env.get('SLURM_STEP_ID', '0')}"})


def _slurm_tasks_on_first_node(env: Mapping[str, str]) -> int:
    spec = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "1")
    match = re.match(r"\d+", spec)
    return int(match.group()) if match else 1


def slurm_port(job_id: str) -> int:
    return SLURM_PORT_BASE + int(job_id[-4:])


@emits("master-port-invalid", "rank-config-invalid")
def _from_vars(env: Mapping[str, str], launcher: str, rank: str, size: str, local: str, local_size: str,
               need_master: bool = False) -> World:
    """The world a launcher's variables describe (RANK/WORLD_SIZE style); missing or inconsistent ones are
    rank-config-invalid."""
    values = {name: _integer(env, name) for name in (rank, size)}
    if need_master and "MASTER_ADDR" not in env:
        raise WorldError("rank-config-invalid", f"{launcher} does not say where rank 0 listens: MASTER_ADDR is unset",
                         "Export it to every rank, e.g. `mpirun -x MASTER_ADDR=$(hostname) -x MASTER_PORT=29500 ...`.")
    port = _port(env.get("MASTER_PORT", str(DEFAULT_PORT)))
    world = World(rank=values[rank], world_size=values[size],
                  local_rank=_integer(env, local, default=0) if env.get(local) else 0,
                  local_world_size=_integer(env, local_size, default=1) if env.get(local_size) else 1,
                  master_addr=env.get("MASTER_ADDR", "127.0.0.1"), master_port=port, launcher=launcher)
    if world.world_size < 1 or not 0 <= world.rank < world.world_size:
        raise WorldError("rank-config-invalid",
                         f"{rank}={world.rank} is not in [0, {size}={world.world_size})",
                         "Let the launcher set the ranks, or give every process a distinct rank below the world size.")
    return world


@emits("rank-config-invalid")
def _integer(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    """An integer launcher variable, or rank-config-invalid saying which one is missing or not a number."""
    value = env.get(name)
    if value is None and default is not None:
        return default
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise WorldError("rank-config-invalid", f"{name}={value!r} is not an integer",
                         f"Set {name} to an integer (the launcher normally does).") from None


@emits("master-port-invalid")
def _port(value: str) -> int:
    """MASTER_PORT as a port number, or master-port-invalid."""
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise WorldError("master-port-invalid", f"MASTER_PORT={value!r} is not a port in 1..65535",
                         "Set a free port, e.g. `export MASTER_PORT=29500`.")
    return int(value)


# ------------------------------------------------------------------ SLURM hostlists

_HOSTLIST_ITEM = re.compile(r"([^,\[]+)(?:\[([^\]]+)\])?([^,\[]*)")


def expand_hostlist(spec: str) -> list[str]:
    """Expand SLURM's hostlist syntax: `node[01-03,07],gpu-a[1-2]-ib` -> node01 node02 node03 node07 ..."""
    hosts: list[str] = []
    for item in _split_top_level(spec):
        hosts.extend(_expand_item(item))
    return hosts


def _split_top_level(spec: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in spec.strip():
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    return [i.strip() for i in [*items, current] if i.strip()]


def _expand_item(item: str) -> list[str]:
    """One item may hold several bracket groups (`r[1-2]n[3-4]`): expand the first, recurse on the rest."""
    start = item.find("[")
    if start < 0:
        return [item]
    end = item.index("]", start)
    prefix, ranges, rest = item[:start], item[start + 1:end], item[end + 1:]
    out = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        width = len(lo)
        numbers = range(int(lo), int(hi or lo) + 1)
        for n in numbers:
            out.extend(prefix + str(n).zfill(width) + tail for tail in _expand_item(rest))
    return out


# ------------------------------------------------------------------ --local N

def default_local_ranks() -> int:
    """One rank per GPU, or 2 on a host without one (NVML; no torch import needed)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        count = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and count:
        count = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return count if count > 0 else 2


def listen_socket(port: int) -> socket.socket:
    """Bind the store's port now (0 = any free one), so children learn it before the store starts."""
    sock = socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET)
    try:
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::" if sock.family == socket.AF_INET6 else "", port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class LocalRanks:
    """N rank processes on this host, each `python -m nccl_doctor check` with launcher variables set.

    Children get their own session (Ctrl-C reaches only the parent, which then ends them) and write
    their output to files, so a child that fails before it reaches the store can still explain why.
    """

    count: int
    args: list[str]
    master_addr: str
    master_port: int
    rank_env: dict[int, dict[str, str]] = field(default_factory=dict)
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    command: str = "check"  # the nccl-doctor command each rank runs (`bench` spawns its ranks too)
    started_at: float = 0.0  # time.time() when the first rank was started

    def __post_init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="nccl-doctor-local-")
        self._lifeline: int | None = None

    def start(self) -> None:
        self.started_at = time.time()
        child_end, self._lifeline = os.pipe()  # both non-inheritable: only the children given child_end get it
        try:
            self._spawn(child_end)
        finally:
            os.close(child_end)

    def _spawn(self, child_end: int) -> None:
        for rank in range(self.count):
            inherited = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
            env = {**inherited, "RANK": str(rank), "WORLD_SIZE": str(self.count), "LOCAL_RANK": str(rank),
                   "LOCAL_WORLD_SIZE": str(self.count), "MASTER_ADDR": self.master_addr,
                   "MASTER_PORT": str(self.master_port), "NCCL_DOCTOR_LOCAL_JUDGE": "1",
                   PARENT_FD: str(child_end), **self.rank_env.get(rank, {})}
            out = open(self._path(rank, "out"), "wb")
            err = open(self._path(rank, "err"), "wb")
            with out, err:
                self.procs[rank] = subprocess.Popen(
                    [sys.executable, "-m", "nccl_doctor", self.command, *self.args], env=env, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=err, start_new_session=True, pass_fds=(child_end,))

    def _path(self, rank: int, stream: str) -> Path:
        return Path(self._dir.name) / f"rank{rank}.{stream}"

    def exits(self) -> dict[int, int]:
        """Return codes of the children that have ended (negative: killed by that signal)."""
        return {r: p.returncode for r, p in self.procs.items() if p.poll() is not None}

    def pids(self) -> dict[int, int]:
        return {r: p.pid for r, p in self.procs.items()}

    def reports(self) -> dict[int, dict]:
        """What children that could not join printed: one JSON object per line on stdout."""
        found = {}
        for rank in self.procs:
            for line in self._read(rank, "out").splitlines():
                try:
                    found[rank] = json.loads(line)
                except ValueError:
                    continue
        return found

    def stderr_tail(self, rank: int, lines: int = 8) -> list[str]:
        text = self._read(rank, "err")
        keep = [ln for ln in text.splitlines() if ln.strip() and "NumPy" not in ln and "_conversion_method" not in ln]
        return keep[-lines:]

    def _read(self, rank: int, stream: str) -> str:
        try:
            return self._path(rank, stream).read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, grace: float = 3.0) -> None:
        """Wait up to `grace` for the children to end by themselves, then terminate, then kill; reap all."""
        deadline = time.monotonic() + grace
        while self.procs and time.monotonic() < deadline and len(self.exits()) < len(self.procs):
            time.sleep(0.05)
        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
            alive = [p for p in self.procs.values() if p.poll() is None]
            for p in alive:
                _signal_group(p, sig)
            end = time.monotonic() + wait
            for p in alive:
                try:
                    p.wait(timeout=max(0.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        self._dir.cleanup()


def watch_parent(env: Mapping[str, str]) -> None:
    """In a --local child: when the parent dies (its end of the pipe closes), end this rank as SIGTERM would,
    and after ORPHAN_GRACE kill its process group (the rank and whatever it started), stuck or not."""
    fd = env.get(PARENT_FD, "")
    if not fd.isdigit():
        return

    def wait_for_the_end() -> None:
        try:
            while os.read(int(fd), 1):  # nothing is ever written: this returns b"" when the parent is gone
                pass
        except OSError:
            return  # not the pipe it should be: nothing to watch
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=wait_for_the_end, name="nccl-doctor-parent-watch", daemon=True).start()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the child's process group: the rank and anything it started (its session is its own)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
