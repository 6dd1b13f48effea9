"""Hardware facts (probe/hardware.py) -> findings: topology, InfiniBand ports, NVLink and fabric
manager, GPU health, PCIe links. `topo` runs it over its full reading; `lint` (and so `check`, on every
rank) over probe.collect()'s hardware and infiniband sections.

Each check is one small function over the facts and the NCCL environment that yields findings, and
yields nothing when all is well; `judge()` runs them all. Facts a probe could not read
({"unavailable": ...}) make their checks silent rather than guess. This module is the one home of the
InfiniBand judgements (NCCL_IB_HCA, ports, /dev/infiniband in containers, GIDs, rates, counters).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..model import Evidence, Finding, Severity
from ..probe.infiniband import hca_matches, parse_hca, port_usable
from ..probe.topology import distance_rank, knowledge
from .nccl_parse import strtoll
from ..roads import emits

Facts = Mapping[str, Any]
Env = Mapping[str, str]
Check = Callable[[Facts, Env], Iterator[Finding]]

SMI = "nvidia-smi topo -m"
IB_SYSFS = "/sys/class/infiniband"
ROCE_V2 = "RoCE v2"
PHYS_MEANING = {
    "Polling": "no cable or no link partner",
    "Disabled": "administratively disabled",
    "LinkUp": "the link is up but no subnet manager has configured the port",
    "LinkErrorRecovery": "the link is recovering from errors",
}


def part(facts: Facts, key: str) -> dict[str, Any]:
    """A probe's facts, or {} when the probe could not read them."""
    value = facts.get(key) or {}
    return {} if "unavailable" in value else value


def worse(a: Severity, b: Severity) -> Severity:
    return a if a.rank <= b.rank else b


def setting(env: Env, name: str) -> Evidence:
    """Where a variable was set: the file and line when `env` knows them (lint's settings), else "env"."""
    where = getattr(env, "where", None)
    source, line = where(name) if where else ("env", None)
    return Evidence(source, f"{name}={env[name]}", line)


# ---------------------------------------------------------------- InfiniBand facts

def ib_in_use(env: Env) -> bool:
    """NCCL_IB_DISABLE is read with strtoll: only a non-zero number turns the IB transport off."""
    return strtoll(env.get("NCCL_IB_DISABLE", "")).value == 0


def ib_devices(facts: Facts) -> list[dict[str, Any]] | None:
    """The RDMA devices sysfs showed ([] when none), or None when they were not read."""
    ib = facts.get("ib_ports")
    return None if not isinstance(ib, Mapping) or "unavailable" in ib else ib.get("devices", [])


def sysfs_ports(facts: Facts, spec: str | None = None) -> list[tuple[str, int, dict[str, Any]]]:
    """(device, port number, port facts) of every sysfs port that NCCL_IB_HCA=spec selects."""
    return [(dev["name"], p["port"], p) for dev in ib_devices(facts) or () for p in dev.get("ports", ())
            if hca_matches(dev["name"], p["port"], spec)]


def hca_candidates(facts: Facts) -> list[tuple[str, int | None]]:
    """What NCCL_IB_HCA is matched against: the sysfs ports, else the NICs of a saved matrix (port unknown)."""
    ports = [(dev, num) for dev, num, _ in sysfs_ports(facts)]
    return ports or [(name, None) for name in (part(facts, "topology").get("nics") or {}).values()]


def shown(dev: str, num: int | None) -> str:
    return dev if num is None else f"{dev}:{num}"


def state_text(p: Mapping[str, Any]) -> str:
    why = PHYS_MEANING.get(p.get("phys_state") or "", "")
    if p.get("phys_state") == "LinkUp" and p.get("link_layer") != "InfiniBand":
        why = ""  # only InfiniBand ports wait for a subnet manager
    return f"{p.get('state') or '?'}/{p.get('phys_state') or '?'}" + (f": {why}" if why else "")


def port_evidence(dev: str, num: int, p: Mapping[str, Any]) -> Evidence:
    return Evidence(f"{IB_SYSFS}/{dev}/ports/{num}", f"state={p.get('state_code')}: {p.get('state')}, "
                                                     f"phys_state={p.get('phys_state_code')}: {p.get('phys_state')}")


# ---------------------------------------------------------------- topology

def nearest(row: Mapping[str, str], nics: Mapping[str, str],
            allowed: set[str] | None = None) -> tuple[str, list[str]] | None:
    """(distance class, RDMA names) of the closest NICs in a GPU's row, among `allowed` names."""
    cells = [(cell, name) for label, name in nics.items() if (cell := row.get(label))
             and (allowed is None or name in allowed)]
    if not cells:
        return None
    best = min(distance_rank(cell) for cell, _ in cells)
    winners = [(cell, name) for cell, name in cells if distance_rank(cell) == best]
    return winners[0][0], [name for _, name in winners]


@emits("gpu-nic-far")
def check_gpu_nic_far(facts: Facts, env: Env) -> Iterator[Finding]:
    """GPUs whose nearest NIC that NCCL uses sits across the CPU interconnect (SYS)."""
    topo = part(facts, "topology")
    nics = topo.get("nics") or {}
    if not nics or not ib_in_use(env):
        return
    far = [(gpu, hit) for gpu in topo.get("gpus", [])
           if (hit := nearest(topo["matrix"].get(gpu, {}), nics)) and hit[0] == "SYS"]
    if far:
        gpus = ", ".join(gpu for gpu, _ in far)
        yield Finding(
            "gpu-nic-far", Severity.WARNING,
            f"{gpus}: the nearest RDMA NIC is across the CPU interconnect (SYS); multi-node traffic of "
            f"{'this GPU' if len(far) == 1 else 'these GPUs'} crosses sockets without GPUDirect RDMA",
            confidence=0.7,
            evidence=[Evidence(topo.get("source", SMI), f"{gpu}: nearest NIC {', '.join(names)} = SYS")
                      for gpu, (_, names) in far],
            fix=["This is the node's wiring: place multi-node ranks on the GPUs that have a PIX/PXB NIC, "
                 "or add a NIC on the other socket."])


@emits("gpu-nic-far", "ib-hca-no-match", "ib-missing-in-container")
def check_ib_hca(facts: Facts, env: Env) -> Iterator[Finding]:
    """NCCL_IB_HCA that selects nothing on this host, a prefix list that selects more than it names, or a
    choice that leaves GPUs without their near NIC."""
    spec = env.get("NCCL_IB_HCA")
    if not spec or not ib_in_use(env):
        return
    candidates = hca_candidates(facts)
    if not candidates:
        if ib_devices(facts) == []:
            yield from no_rdma_devices(facts, env)
        return
    chosen = [(dev, num) for dev, num in candidates if hca_matches(dev, num, spec)]
    if not chosen:
        names = ", ".join(shown(dev, num) for dev, num in candidates)
        devices = sorted({dev for dev, _ in candidates})
        yield Finding(
            "ib-hca-no-match", Severity.ERROR,
            f"NCCL_IB_HCA={spec} selects none of this host's RDMA devices ({names}); NCCL falls back to TCP sockets",
            confidence=0.9, evidence=[setting(env, "NCCL_IB_HCA"), Evidence(IB_SYSFS, "devices: " + names)],
            fix=[f"`export NCCL_IB_HCA={'=' + ','.join(devices)}` (the leading `=` asks for exact names; or the "
                 "subset you mean), or unset it."])
        return
    yield from prefix_surprise(env, spec, {dev for dev, _ in candidates}, {dev for dev, _ in chosen})
    yield from far_hca_choice(facts, env, spec, {dev for dev, _ in chosen})


@emits("ib-hca-no-match", "ib-missing-in-container")
def no_rdma_devices(facts: Facts, env: Env) -> Iterator[Finding]:
    """NCCL_IB_HCA or IB expected, but no RDMA device is visible (in a container: not mapped in)."""
    container = bool((part(facts, "host").get("container") or {}).get("detected"))
    yield Finding(
        "ib-missing-in-container" if container else "ib-hca-no-match", Severity.WARNING,
        f"NCCL_IB_HCA={env['NCCL_IB_HCA']} but this host shows no RDMA devices (nothing in {IB_SYSFS})"
        + (", as containers started without the RDMA devices do" if container else "") + ": NCCL uses TCP sockets",
        confidence=0.7, evidence=[setting(env, "NCCL_IB_HCA"), Evidence(IB_SYSFS, "no devices")])


@emits("ib-hca-no-match")
def prefix_surprise(env: Env, spec: str, devices: set[str], chosen: set[str]) -> Iterator[Finding]:
    """Without `=`, every entry is a prefix: an entry naming one device (mlx5_1) also selects the devices
    whose names it begins (mlx5_10..mlx5_19). An entry that names no device (mlx5) is a prefix on purpose."""
    hca = parse_hca(spec)
    exact_names = set(hca.names) & devices
    extra = sorted(d for d in chosen - exact_names if any(d.startswith(name) for name in exact_names))
    if hca.exact or hca.exclude or not extra:
        return
    yield Finding(
        "ib-hca-no-match", Severity.WARNING, f"NCCL_IB_HCA={spec} is a prefix list: it also selects {', '.join(extra)}",
        confidence=0.6, evidence=[setting(env, "NCCL_IB_HCA")],
        fix=[f"Use exact names, with one leading `=`: `export NCCL_IB_HCA=={spec}`"])


@emits("gpu-nic-far")
def far_hca_choice(facts: Facts, env: Env, spec: str, chosen: set[str]) -> Iterator[Finding]:
    """NCCL_IB_HCA leaves a GPU with only a far NIC while a near one (within the GDR limit) exists."""
    topo = part(facts, "topology")
    nics = topo.get("nics") or {}
    gdr_limit = distance_rank(knowledge()["distance"]["gdr_default_max"])
    hurt = []
    for gpu in topo.get("gpus", []):
        row = topo["matrix"].get(gpu, {})
        best, kept = nearest(row, nics), nearest(row, nics, chosen)
        if best and kept and distance_rank(kept[0]) > gdr_limit >= distance_rank(best[0]):
            hurt.append((gpu, best, kept))
    if hurt:
        left_out = sorted({name for _, best, _ in hurt for name in best[1]} - chosen)
        yield Finding(
            "gpu-nic-far", Severity.WARNING,
            f"NCCL_IB_HCA={spec} leaves out {', '.join(left_out)}, the NIC(s) next to "
            f"{', '.join(g for g, _, _ in hurt)}; those GPUs reach their NIC only across "
            f"{'/'.join(sorted({kept[0] for _, _, kept in hurt}))} without GPUDirect RDMA",
            confidence=0.8,
            evidence=[setting(env, "NCCL_IB_HCA")] + [
                Evidence(topo.get("source", SMI), f"{g}: {'/'.join(best[1])} = {best[0]}, selected "
                                                  f"{'/'.join(kept[1])} = {kept[0]}") for g, best, kept in hurt],
            fix=[f"Add {', '.join(left_out)} to NCCL_IB_HCA (or unset it to let NCCL pick the nearest NIC)."])


# ---------------------------------------------------------------- InfiniBand / RoCE ports

@emits("ib-port-down")
def check_ib_ports(facts: Facts, env: Env) -> Iterator[Finding]:
    """Ports NCCL would consider (NCCL_IB_HCA applied) that are not ACTIVE. No usable port left: one
    finding, NCCL falls back to TCP sockets. Otherwise one per port; a port administratively Disabled is
    taken as deliberate unless NCCL_IB_HCA names it."""
    spec = env.get("NCCL_IB_HCA") or None
    ports = sysfs_ports(facts, spec)
    down = [(dev, num, p) for dev, num, p in ports if not port_usable(p)]
    if not down or not ib_in_use(env):
        return
    if len(down) == len(ports):
        listing = ", ".join(f"{dev}:{num} {state_text(p)}" for dev, num, p in down)
        yield Finding(
            "ib-port-down", Severity.ERROR if spec else Severity.WARNING,
            (f"NCCL_IB_HCA={spec} selects no ACTIVE port" if spec else "no InfiniBand/RoCE port is ACTIVE")
            + f" ({listing}): NCCL falls back to TCP sockets",
            confidence=0.9, evidence=([setting(env, "NCCL_IB_HCA")] if spec else [])
            + [port_evidence(dev, num, p) for dev, num, p in down])
        return
    hca = parse_hca(spec) if spec else None
    named = set(hca.names) if hca and not hca.exclude else set()
    usable = ",".join(f"{dev}:{num}" for dev, num, p in ports if port_usable(p))
    for dev, num, p in down:
        # keep what NCCL_IB_HCA selects, minus this port
        value = f"^{dev}:{num}" if hca is None else f"{spec},{dev}:{num}" if hca.exclude else f"={usable}"
        if dev not in named and p.get("phys_state") == "Disabled":
            continue
        yield Finding(
            "ib-port-down", Severity.ERROR if dev in named else Severity.WARNING,
            f"{dev} port {num} ({p.get('link_layer') or '?'}) is {state_text(p)}; NCCL skips it, and nodes can "
            "end up with different NIC counts",
            confidence=0.9, evidence=([setting(env, "NCCL_IB_HCA")] if dev in named else []) + [
                port_evidence(dev, num, p)],
            fix=[f"Exclude it until fixed: export NCCL_IB_HCA={value}"])


@emits("ib-rate-degraded")
def check_ib_rate(facts: Facts, env: Env) -> Iterator[Finding]:
    """Active ports that trained below their peers of the same adapter type, or to a 1X width."""
    if not ib_in_use(env):
        return
    groups: dict[tuple[Any, ...], list[tuple[str, int, dict[str, Any]]]] = {}
    for dev in ib_devices(facts) or ():
        for p in dev.get("ports", ()):
            if hca_matches(dev["name"], p["port"], env.get("NCCL_IB_HCA")) and port_usable(p) and p.get("rate_gbps"):
                adapter = dev.get("hca_type") or dev.get("board_id")
                groups.setdefault((p.get("link_layer"), adapter), []).append((dev["name"], p["port"], p))
    for members in groups.values():
        expected = max(p["rate_gbps"] for _, _, p in members)
        for dev, num, p in members:
            narrow = p.get("link_layer") == "InfiniBand" and p.get("width") == "1X"
            if p["rate_gbps"] < expected or narrow:
                than = f", its peers at {expected:g} Gb/sec" if p["rate_gbps"] < expected else ", a single lane"
                yield Finding(
                    "ib-rate-degraded", Severity.WARNING, f"{dev} port {num} runs at {p.get('rate')}{than}",
                    confidence=0.75,
                    evidence=[Evidence(f"{IB_SYSFS}/{dev}/ports/{num}/rate", p.get("rate") or "")],
                    fix=[f"Reseat or replace the cable/transceiver of {dev} port {num}; meanwhile "
                         f"export NCCL_IB_HCA=^{dev}:{num}"])


@emits("ib-link-errors")
def check_ib_counters(facts: Facts, env: Env) -> Iterator[Finding]:
    """Error counters that rose between two samples; without sampling, non-zero totals as info (the
    counters are read by `topo`, not by probe.collect())."""
    if not ib_in_use(env):
        return
    table = knowledge()["ib"]
    deltas = part(facts, "ib_counter_deltas")
    if deltas:
        known = table["counters"] | table["hw_counters"]
        for port, grown in deltas.get("deltas", {}).items():
            bad = {name: n for name, n in grown.items() if name in known}
            if not bad:
                continue
            severity = Severity.INFO
            for name in bad:
                severity = worse(severity, Severity(known[name]["severity"]))
            yield Finding(
                "ib-link-errors", severity,
                f"{port}: " + ", ".join(f"{name} +{n}" for name, n in bad.items())
                + f" in {deltas['seconds']:g} s ({'; '.join(known[n]['meaning'] for n in bad)})",
                confidence=0.85,
                evidence=[Evidence(f"{IB_SYSFS}/{port.replace('/', '/ports/')}/"
                                   f"{'hw_counters' if name in table['hw_counters'] else 'counters'}/{name}",
                                   f"+{n} in {deltas['seconds']:g} s") for name, n in bad.items()],
                fix=[f"Replace the cable/transceiver of {port}; exclude it meanwhile: "
                     f"export NCCL_IB_HCA=^{port.replace('/', ':')}"])
        return
    for dev, num, p in sysfs_ports(facts, env.get("NCCL_IB_HCA")):
        nonzero = {name: p["counters"][name] for name in table["counters"] if p.get("counters", {}).get(name)}
        if nonzero:
            yield Finding(
                "ib-link-errors", Severity.INFO,
                f"{dev}/{num} error counters are non-zero since their last reset: "
                + ", ".join(f"{k}={v}" for k, v in nonzero.items()) + "; sample them to see whether they rise",
                confidence=0.4,
                evidence=[Evidence(f"{IB_SYSFS}/{dev}/ports/{num}/counters/{k}", str(v)) for k, v in nonzero.items()],
                fix=["Run `nccl-doctor topo --sample 30` to read the counters twice, 30 s apart."])


@emits("roce-gid-index")
def check_roce_gid(facts: Facts, env: Env) -> Iterator[Finding]:
    """NCCL_IB_GID_INDEX against the GID table of every active RoCE port NCCL would use. Only the slots
    that were read count: probe.collect() reads the first ones, `topo` all of them."""
    if not ib_in_use(env):
        return
    wanted = strtoll(env["NCCL_IB_GID_INDEX"]).value if env.get("NCCL_IB_GID_INDEX") else -1
    for dev, num, p in sysfs_ports(facts, env.get("NCCL_IB_HCA")):
        if p.get("link_layer") != "Ethernet" or not port_usable(p) or "gids" not in p:
            continue
        gids = {g["index"]: g for g in p["gids"]}
        complete = p.get("gids_read", 0) >= p.get("gid_slots", 0)
        v2_ipv4 = sorted(i for i, g in gids.items() if g.get("type") == ROCE_V2 and g.get("ipv4"))
        where = Evidence(f"{IB_SYSFS}/{dev}/ports/{num}/gids", "; ".join(
            f"[{i}] {g.get('type')} {g.get('ipv4') or g['gid']}" for i, g in sorted(gids.items())) or "empty")
        suggestion = [f"export NCCL_IB_GID_INDEX={i}  (RoCE v2, {gids[i]['ipv4']})" for i in v2_ipv4[:1]]
        if wanted != -1:
            entry = gids.get(wanted)
            if entry is None and (complete or wanted < p.get("gids_read", 0)):
                problem, severity = f"NCCL_IB_GID_INDEX={wanted} names an empty GID slot on {dev} port {num}", \
                    Severity.ERROR
            elif entry is not None and entry.get("type") != ROCE_V2 and v2_ipv4:
                problem, severity = (f"NCCL_IB_GID_INDEX={wanted} on {dev} port {num} is {entry.get('type')}, "
                                     "which does not route across IP subnets"), Severity.WARNING
            elif entry is not None and not entry.get("ipv4") and v2_ipv4:
                problem, severity = (f"NCCL_IB_GID_INDEX={wanted} on {dev} port {num} is a link-local IPv6 GID "
                                     "while a routable IPv4 RoCE v2 GID exists"), Severity.WARNING
            else:
                continue
            yield Finding("roce-gid-index", severity, problem, confidence=0.85,
                          evidence=[setting(env, "NCCL_IB_GID_INDEX"), where], fix=suggestion)
        elif not v2_ipv4 and complete:
            yield Finding(
                "roce-gid-index", Severity.WARNING,
                f"RoCE port {dev} port {num} has no RoCE v2 GID with an IPv4 address: its net device has "
                "no IPv4 address, so NCCL has no routable GID to pick",
                confidence=0.7, evidence=[where],
                fix=[f"Give the net device of {dev} an IPv4 address (`ip addr add ... dev "
                     f"{next((g['ndev'] for g in gids.values() if g.get('ndev')), 'IFACE')}`), then check "
                     "`show_gids`."])


@emits("ib-missing-in-container")
def check_ib_container(facts: Facts, env: Env) -> Iterator[Finding]:
    """RDMA devices in sysfs without their /dev/infiniband/uverbs* nodes (a container started without them)."""
    ib = part(facts, "ib_ports")
    if not ib.get("devices") or not ib_in_use(env):
        return
    dev = ib.get("dev_infiniband") or {}
    if dev.get("present") and dev.get("uverbs"):
        return
    yield Finding(
        "ib-missing-in-container", Severity.ERROR if env.get("NCCL_IB_HCA") else Severity.WARNING,
        f"{', '.join(d['name'] for d in ib['devices'])} listed in {IB_SYSFS} but "
        + ("/dev/infiniband is missing" if not dev.get("present") else "/dev/infiniband has no uverbs device")
        + ": NCCL cannot open the HCAs and uses TCP sockets between nodes",
        confidence=0.8,
        evidence=[Evidence("/dev/infiniband", "missing" if not dev.get("present") else "no uverbs*")])


# ---------------------------------------------------------------- NVLink, NVSwitch, fabric manager

@emits("nvlink-inactive")
def check_nvlink_links(facts: Facts, env: Env) -> Iterator[Finding]:
    """Per NVML: GPUs with fewer active NVLinks than the best-connected GPU of the node."""
    gpus = [g for g in part(facts, "gpu_health").get("gpus", []) if g.get("nvlink")]
    if not gpus:
        return
    active = {g["index"]: sum(link["active"] for link in g["nvlink"]) for g in gpus}
    most = max(active.values())
    if most == 0:
        if not part(facts, "fabric").get("nvswitch", {}).get("present"):  # with NVSwitches: check_fabric
            yield Finding("nvlink-inactive", Severity.ERROR,
                          "every NVLink of every GPU is inactive; GPU-to-GPU traffic falls back to PCIe",
                          confidence=0.8,
                          evidence=[Evidence("NVML", f"GPU{g['index']}: 0/{len(g['nvlink'])} links active")
                                    for g in gpus])
        return
    for g in gpus:
        if active[g["index"]] < most:
            down = [str(link["link"]) for link in g["nvlink"] if not link["active"]]
            yield Finding(
                "nvlink-inactive", Severity.ERROR,
                f"GPU{g['index']} has {active[g['index']]} active NVLinks, other GPUs {most}; inactive: link "
                + ", ".join(down), confidence=0.85,
                evidence=[Evidence("NVML", f"GPU{g['index']} {g.get('bus_id')}: links {', '.join(down)} inactive")],
                fix=[f"`nvidia-smi nvlink --status -i {g['index']}`; drain the node and have GPU{g['index']} "
                     "or its baseboard inspected."])


@emits("nvlink-inactive")
def check_nvlink_matrix(facts: Facts, env: Env) -> Iterator[Finding]:
    """Per the matrix, when NVML did not say: on a node whose GPU pairs are almost all NV<k>
    (NVSwitch), pairs with fewer links or none."""
    if part(facts, "gpu_health").get("gpus"):
        return
    topo = part(facts, "topology")
    gpus = topo.get("gpus", [])
    pairs = {(a, b): topo["matrix"].get(a, {}).get(b) for i, a in enumerate(gpus) for b in gpus[i + 1:]}
    counts = Counter(cell for cell in pairs.values() if cell and cell.startswith("NV"))
    if len(pairs) < 3 or not counts:
        return
    common, seen = counts.most_common(1)[0]
    top = max(int(c[2:]) for c in counts)
    if int(common[2:]) != top or seen < len(pairs) * 2 / 3:
        return  # mixed meshes (DGX-1 cube mesh, NVLink bridges) are built that way
    short = [(a, b, cell) for (a, b), cell in pairs.items() if cell and cell != common]
    if short:
        yield Finding(
            "nvlink-inactive", Severity.WARNING,
            f"{len(short)} GPU pair(s) have fewer NVLinks than the node's {common}: "
            + ", ".join(f"{a}-{b} {cell}" for a, b, cell in short[:6]),
            confidence=0.6, evidence=[Evidence(topo.get("source", SMI), f"{a} {b}: {cell} (others {common})")
                                      for a, b, cell in short],
            fix=["`nvidia-smi nvlink --status` on this node; drain it and have the links inspected."])


@emits("p2p-disabled-nvlink")
def check_p2p_nvlink(facts: Facts, env: Env) -> Iterator[Finding]:
    """GPU pairs connected by NVLink whose peer-to-peer status is not OK."""
    p2p = part(facts, "gpu_health").get("p2p", {})
    matrix = part(facts, "topology").get("matrix", {})
    for pair, status in p2p.items():
        a, b = (f"GPU{i}" for i in pair.split("-"))
        cell = matrix.get(a, {}).get(b, "")
        if cell.startswith("NV") and status != "OK":
            yield Finding(
                "p2p-disabled-nvlink", Severity.ERROR,
                f"{a} and {b} are connected by {cell} but NVML reports peer access {status}",
                confidence=0.85, evidence=[Evidence("NVML", f"P2P read {a}->{b}: {status}"),
                                           Evidence(part(facts, 'topology').get('source', SMI), f"{a} {b}: {cell}")])


def fabric_not_ready(state: Mapping[str, Any]) -> str | None:
    """Why NVML's fabric state for one GPU is not usable, or None when it is."""
    if state["state"] in ("not_started", "in_progress"):
        return state["state"]
    if state["state"] == "completed" and state["status"] != 0:
        return f"completed with status {state['status']}"
    return None


@emits("fabric-manager")
def check_fabric(facts: Facts, env: Env) -> Iterator[Finding]:
    """Fabric manager not running, or GPUs whose fabric state is not completed, on NVSwitch systems."""
    fabric = part(facts, "fabric")
    states = fabric.get("gpu_fabric_state", {})
    process, service = fabric.get("fabric_manager_process"), fabric.get("fabric_manager_service")
    bad = {gpu: why for gpu, s in states.items() if (why := fabric_not_ready(s))}
    if bad:
        manager = "" if process is None else f"; nv-fabricmanager {'running' if process else 'not running'}"
        yield Finding(
            "fabric-manager", Severity.ERROR,
            f"NVSwitch fabric not ready on {', '.join(bad)} ({', '.join(sorted(set(bad.values())))}){manager}: "
            "NVLink and NVLS setup fail (CUDA 'system not yet initialized')",
            confidence=0.9,
            evidence=[Evidence("NVML fabric info", f"{gpu}: {why}") for gpu, why in bad.items()])
        return
    switch = fabric.get("nvswitch", {})
    if states or not switch.get("present") or process is not False or service not in (None, "inactive", "failed"):
        return  # NVML says the fabric is fine (the manager may run outside this container), or no NVSwitch
    where = " (service " + service + ")" if service else " (no systemd to ask: in a container it runs on the host)"
    yield Finding(
        "fabric-manager", Severity.ERROR if service else Severity.WARNING,
        f"this node has NVSwitches but no nvidia-fabricmanager is running{where}",
        confidence=0.85 if service else 0.5,
        evidence=[Evidence("sysfs/dev", "NVSwitch: " + ", ".join(
            switch.get("pci") or switch.get("driver_devices") or switch.get("dev_nodes")))])


# ---------------------------------------------------------------- GPU health

def gpus_of(facts: Facts) -> list[dict[str, Any]]:
    return part(facts, "gpu_health").get("gpus", [])


@emits("gpu-throttling")
def check_throttling(facts: Facts, env: Env) -> Iterator[Finding]:
    """GPUs throttling for heat, power or a hardware slowdown (NVML clock-event reasons)."""
    severity_of = {r["name"]: r["severity"] for r in knowledge()["gpu"]["throttle"]}
    margin = knowledge()["gpu"]["hot_margin_c"]
    for g in gpus_of(facts):
        slowing = [name for name in g.get("throttle", []) if severity_of.get(name) == "warning"]
        temp, limit = g.get("temperature_c"), g.get("slowdown_temp_c")
        hot = temp is not None and limit and temp >= limit - margin
        if slowing or hot:
            what = []
            if slowing:
                what.append("clocks held down by " + ", ".join(slowing))
            if hot:
                what.append(f"{temp} C, slowdown at {limit} C")
            yield Finding(
                "gpu-throttling", Severity.WARNING, f"GPU{g['index']} ({g.get('bus_id')}): {'; '.join(what)}",
                confidence=0.8,
                evidence=[Evidence("NVML", f"GPU{g['index']}: clock event reasons {g.get('clock_event_reasons')}, "
                                           f"temperature {temp} C")])


@emits("gpu-ecc")
def check_ecc(facts: Facts, env: Env) -> Iterator[Finding]:
    """Uncorrectable ECC errors, pending page retirement or failed row remapping."""
    for g in gpus_of(facts):
        ecc, rows, pages = g.get("ecc") or {}, g.get("remapped_rows") or {}, g.get("retired_pages") or {}
        errors, warnings = [], []
        if ecc.get("volatile_uncorrected"):
            errors.append(f"{ecc['volatile_uncorrected']} uncorrectable ECC errors since the driver loaded")
        if rows.get("failure"):
            errors.append("row remapping failed (no spare rows left)")
        if rows.get("pending"):
            warnings.append("row remapping pending until the GPU is reset")
        if pages.get("pending"):
            warnings.append("page retirement pending until the GPU is reset")
        if not errors and not warnings and ecc.get("aggregate_uncorrected"):
            yield Finding("gpu-ecc", Severity.INFO, f"GPU{g['index']}: {ecc['aggregate_uncorrected']} uncorrectable "
                          "ECC errors over its lifetime, none since the driver loaded", confidence=0.5,
                          evidence=[Evidence("NVML", f"GPU{g['index']}: aggregate uncorrected ECC "
                                                     f"{ecc['aggregate_uncorrected']}")])
            continue
        if errors or warnings:
            yield Finding(
                "gpu-ecc", Severity.ERROR if errors else Severity.WARNING,
                f"GPU{g['index']} ({g.get('bus_id')}): " + "; ".join(errors + warnings), confidence=0.9,
                evidence=[Evidence("NVML", f"GPU{g['index']}: ecc {ecc}, remapped rows {rows}, retired pages {pages}")],
                fix=[f"Reset the GPU (`nvidia-smi -r -i {g['index']}` with no processes on it) or reboot; "
                     "replace it if uncorrectable errors return."])


@emits("gpu-xid")
def check_xid(facts: Facts, env: Env) -> Iterator[Finding]:
    """Xid events in the kernel log, judged with catalog/hardware.toml."""
    xid = part(facts, "xid")
    if not xid.get("events"):
        return
    table = {x["code"]: x for x in knowledge()["xid"]}
    by_bus = {g.get("bus_id"): f"GPU{g['index']}" for g in gpus_of(facts)}
    by_bus |= {b: label for label, b in part(facts, "topology").get("bus_ids", {}).items()}
    groups: dict[tuple[str | None, int], list[dict[str, Any]]] = {}
    for event in xid["events"]:
        groups.setdefault((event["bus_id"], event["xid"]), []).append(event)
    old = not xid.get("since_boot")
    for (bus, code), events in groups.items():
        known = table.get(code, {"meaning": "unlisted Xid", "severity": "warning"})
        severity = Severity(known["severity"])
        if old and severity != Severity.INFO:
            severity = Severity.WARNING  # from a syslog file: may predate the last reboot
        gpu = by_bus.get(bus, f"GPU at {bus}")
        yield Finding(
            "gpu-xid", severity,
            f"{gpu}: Xid {code} ({known['meaning']}) x{len(events)} "
            + ("in the kernel log (possibly before the last reboot)" if old else "since boot"),
            confidence=0.9 if not old else 0.6,
            evidence=[Evidence(e["source"], e["text"], e["line"]) for e in events[-3:]])


def check_pcie(facts: Facts, env: Env) -> Iterator[Finding]:
    nvml_gpus = gpus_of(facts)
    for g in nvml_gpus:
        yield from pcie_finding(f"GPU{g['index']} ({g.get('bus_id')})", g.get("pcie") or {}, "NVML",
                                check_gen="GpuIdle" not in g.get("throttle", []))
    labels = {b: label for label, b in part(facts, "topology").get("bus_ids", {}).items()}
    for bdf, d in part(facts, "pci").get("devices", {}).items():
        if d["kind"] == "nic":
            name = f"{d.get('rdma')} ({bdf})"
        elif d["kind"] == "gpu" and not nvml_gpus:
            name = f"{labels.get(bdf, 'GPU')} ({bdf})"
        else:
            continue
        yield from pcie_finding(name, d.get("link") or {}, f"/sys/bus/pci/devices/{bdf}",
                                check_gen=d["kind"] == "nic")  # idle GPUs lower their generation to save power


@emits("pcie-degraded")
def pcie_finding(name: str, link: Mapping[str, Any], source: str, check_gen: bool) -> Iterator[Finding]:
    """A PCIe link trained below its maximum width or generation."""
    narrow = link.get("width") and link.get("max_width") and link["width"] < link["max_width"]
    slow = check_gen and link.get("gen") and link.get("max_gen") and link["gen"] < link["max_gen"]
    if narrow or slow:
        yield Finding(
            "pcie-degraded", Severity.WARNING,
            f"{name} PCIe link runs at Gen{link.get('gen')} x{link.get('width')}, "
            f"capable of Gen{link.get('max_gen')} x{link.get('max_width')}",
            confidence=0.75 if narrow else 0.6,
            evidence=[Evidence(source, f"current Gen{link.get('gen')} x{link.get('width')}, "
                                       f"max Gen{link.get('max_gen')} x{link.get('max_width')}")])


@emits("p2p-acs-iommu")
def check_acs_iommu(facts: Facts, env: Env) -> Iterator[Finding]:
    """PCIe ACS enabled on bridges between GPUs (peer-to-peer goes through the root complex)."""
    gpus = {b: d for b, d in part(facts, "pci").get("devices", {}).items() if d["kind"] == "gpu"}
    if len(gpus) < 2:
        return
    redirects = {bridge: flags for d in gpus.values() for bridge, flags in d.get("acs_redirect", {}).items()}
    if redirects:
        yield Finding(
            "p2p-acs-iommu", Severity.WARNING,
            f"ACS redirects peer-to-peer traffic on {len(redirects)} PCIe switch port(s) above the GPUs: "
            "GPU P2P and GPUDirect RDMA go through the root complex, slowly or not at all",
            confidence=0.8,
            evidence=[Evidence(f"/sys/bus/pci/devices/{b}/config", "ACSCtl " + ", ".join(f) + " on")
                      for b, f in redirects.items()],
            fix=["Disable ACS on the switch ports (BIOS, or `setpci -s BDF ECAP_ACS+0x6.w=0000` at boot) as "
                 "NVIDIA's NCCL troubleshooting guide describes."])
    translating = set(knowledge()["pcie"]["iommu_translating"])
    remapped = {b: d["iommu_group_type"] for b, d in gpus.items() if d.get("iommu_group_type") in translating}
    matrix = part(facts, "topology").get("matrix", {})
    all_nvlink = bool(matrix) and all(cell.startswith("NV") for row, cells in matrix.items() if row.startswith("GPU")
                                      for col, cell in cells.items() if col.startswith("GPU"))
    if remapped and not all_nvlink:
        yield Finding(
            "p2p-acs-iommu", Severity.WARNING,
            f"the IOMMU translates DMA for {len(remapped)} GPU(s) (group type "
            f"{'/'.join(sorted(set(remapped.values())))}): PCIe peer-to-peer between GPUs can hang or crawl",
            confidence=0.55,
            evidence=[Evidence(f"/sys/bus/pci/devices/{b}/iommu_group/type", t) for b, t in remapped.items()],
            fix=["Boot with `iommu=pt` (or disable VT-d/AMD-Vi in the BIOS) on bare metal."])


CHECKS: list[Check] = [
    check_fabric, check_nvlink_links, check_nvlink_matrix, check_p2p_nvlink,
    check_xid, check_ecc, check_throttling, check_pcie, check_acs_iommu,
    check_ib_container, check_ib_hca, check_ib_ports, check_ib_rate, check_ib_counters, check_roce_gid,
    check_gpu_nic_far,
]


def judge(facts: Facts, env: Env | None = None, host: str | None = None) -> list[Finding]:
    """Every hardware finding for these facts under this NCCL environment: probe.hardware.hardware_facts(), or
    probe.collect()'s hardware section with its infiniband section as `ib_ports` (and its host section as
    `host`, which says whether this is a container). `env` may say where each setting came from (`where`)."""
    env = env if env is not None else {}
    findings = [finding for check in CHECKS for finding in check(facts, env)]
    if host:
        for finding in findings:
            finding.hosts.append(host)
    return findings
