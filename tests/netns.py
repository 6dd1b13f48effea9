"""Network namespaces that act as hosts, joined by bridges: a small multi-host cluster on one machine.

    with NetnsLab(["h1", "h2", "h3"], {"mgmt": "10.213.1", "data": "10.213.2"}) as lab:
        proc = lab.spawn("h1", ["python", "-c", "..."], env)    # runs inside h1, with hostname h1
        lab.address("h2", "data")                               # 10.213.2.2
        lab.set_down("h3", "data0"); lab.rename("h3", "data0", "ens9")

Each host gets one veth per network, named NETWORK0 (mgmt0, data0), with address PREFIX.N/24
(N = 1, 2, ... in host order); the other ends sit in bridges inside a dedicated "switch" namespace,
so nothing touches the root namespace's interfaces or routes. Processes see their own host name
(`unshare --uts`), and every host's name resolves to its address on the first network (/etc/netns/NS/hosts). Names are unique per lab (prefixed with $NETNS_PREFIX, default "nd", so that
concurrent runs on one machine can tell theirs apart); everything, processes included, is removed on exit.
Slow hosts and links are made with token buckets (`tc ... tbf`): `slow_host` on what a host sends,
`slow_link` on what two hosts send each other (an htb class that a u32 filter picks by destination).
Needs root and `ip netns`; `unavailable()` says why a test must skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Mapping, Sequence

import psutil

IP_TIMEOUT = 10
PREFIX = os.environ.get("NETNS_PREFIX", "nd")


def unavailable() -> str | None:
    """Why a namespace lab cannot be built here, or None."""
    if os.geteuid() != 0:
        return "network-namespace tests need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"{PREFIX}probe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=IP_TIMEOUT)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=IP_TIMEOUT)
    return None


class NetnsLab:
    def __init__(self, hosts: Sequence[str], networks: Mapping[str, str]) -> None:
        self.hosts, self.networks = list(hosts), dict(networks)
        tag = uuid.uuid4().hex[:6]
        self.switch = f"{PREFIX}{tag}sw"
        self.namespaces = {h: f"{PREFIX}{tag}{h}" for h in self.hosts}
        self.procs: list[subprocess.Popen] = []

    # -- lifecycle
    def __enter__(self) -> NetnsLab:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        self._ip("netns", "add", self.switch)
        self._ip("-n", self.switch, "link", "set", "lo", "up")
        for net in self.networks:
            self._ip("-n", self.switch, "link", "add", f"br-{net}", "type", "bridge")
            self._ip("-n", self.switch, "link", "set", f"br-{net}", "up")
        first_net = next(iter(self.networks.values()))
        names = "".join(f"{first_net}.{i} {h}\n" for i, h in enumerate(self.hosts, 1))
        for index, host in enumerate(self.hosts, 1):
            ns = self.namespaces[host]
            hosts_file = Path("/etc/netns") / ns / "hosts"  # `ip netns exec` mounts it over /etc/hosts
            hosts_file.parent.mkdir(parents=True, exist_ok=True)
            hosts_file.write_text(f"127.0.0.1 localhost\n::1 localhost\n{names}")
            self._ip("netns", "add", ns)
            self._ip("-n", ns, "link", "set", "lo", "up")
            for net, prefix in self.networks.items():
                port = f"p{index}{net}"[:15]
                self._ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", f"{net}0",
                         "netns", ns)
                self._ip("-n", self.switch, "link", "set", port, "master", f"br-{net}", "up")
                self._ip("-n", ns, "addr", "add", f"{prefix}.{index}/24", "dev", f"{net}0")
                self._ip("-n", ns, "link", "set", f"{net}0", "up")

    def close(self) -> None:
        """End every process started in the lab (by its own id), then delete the namespaces."""
        for proc in self.procs:
            if proc.poll() is None:
                try:  # torchrun's workers have sessions of their own: end them first, by their ids
                    for child in psutil.Process(proc.pid).children(recursive=True):
                        child.kill()
                except psutil.Error:
                    pass
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in [*self.namespaces.values(), self.switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=IP_TIMEOUT)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)

    # -- use
    def address(self, host: str, net: str) -> str:
        return f"{self.networks[net]}.{self.hosts.index(host) + 1}"

    def spawn(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **popen: object) -> subprocess.Popen:
        """Start argv inside `host` (its network namespace, its own host name and process group)."""
        command = ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "sh", "-c",
                   'hostname "$0" && exec "$@"', host, *argv]
        proc = subprocess.Popen(command, env=dict(env) if env is not None else None, start_new_session=True,
                                stdin=subprocess.DEVNULL, **popen)  # type: ignore[arg-type]
        self.procs.append(proc)
        return proc

    def run_in(self, host: str, *ip_args: str) -> None:
        """`ip ARGS` inside the host's namespace."""
        self._ip("-n", self.namespaces[host], *ip_args)

    def set_down(self, host: str, iface: str) -> None:
        self.run_in(host, "link", "set", iface, "down")

    def rename(self, host: str, old: str, new: str) -> None:
        self.run_in(host, "link", "set", old, "down")
        self.run_in(host, "link", "set", old, "name", new)
        self.run_in(host, "link", "set", new, "up")

    def slow_host(self, host: str, rate: str, iface: str = "data0") -> None:
        """Everything `host` sends on `iface` at `rate` (e.g. "30mbit")."""
        self._tc(host, "qdisc", "replace", "dev", iface, "root", "tbf", "rate", rate, "burst", "32kbit",
                 "latency", "400ms")

    def slow_link(self, a: str, b: str, net: str, rate: str) -> None:
        """What `a` and `b` send each other on network `net` at `rate`; their other traffic untouched."""
        for src, dst in ((a, b), (b, a)):
            iface = f"{net}0"
            self._tc(src, "qdisc", "replace", "dev", iface, "root", "handle", "1:", "htb", "default", "10")
            for cls in ("1:10", "1:20"):
                self._tc(src, "class", "replace", "dev", iface, "parent", "1:", "classid", cls, "htb",
                         "rate", "10gbit")
            self._tc(src, "qdisc", "replace", "dev", iface, "parent", "1:20", "handle", "20:", "tbf", "rate", rate,
                     "burst", "32kbit", "latency", "400ms")
            self._tc(src, "filter", "replace", "dev", iface, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                     "match", "ip", "dst", f"{self.address(dst, net)}/32", "flowid", "1:20")

    def unshape(self, host: str, iface: str = "data0") -> None:
        subprocess.run(["tc", "-n", self.namespaces[host], "qdisc", "del", "dev", iface, "root"],
                       capture_output=True, timeout=IP_TIMEOUT)

    def _tc(self, host: str, *args: str) -> None:
        done = subprocess.run(["tc", "-n", self.namespaces[host], *args], capture_output=True, text=True,
                              timeout=IP_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"tc {' '.join(args)} in {host}: {done.stderr.strip()}")

    @staticmethod
    def _ip(*args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
