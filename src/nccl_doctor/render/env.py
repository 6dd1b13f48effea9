"""`nccl-doctor env` as text: the facts of this host (probe.collect()) laid out in sections, each one saying
why it is missing when its probe could not run."""

from __future__ import annotations

from collections import Counter
from typing import Any

from typing import TextIO

from rich.console import Console
from rich.padding import Padding
from rich.table import Table

from . import literal

from ..probe.network import would_use
from ..probe.topology import distance_rank
from .text import console_for
from .topo import gpu_health_rows

GIB, MIB = 1024**3, 1024**2


def size(n: Any) -> str:
    if n == "unlimited" or n is None:
        return str(n or "?")
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB" if n >= MIB else f"{n / 1024:.0f} KiB"


def missing(section: Any) -> str | None:
    return section.get("unavailable") if isinstance(section, dict) else "not collected"


def fields(console: Console, rows: list[tuple[str, Any]]) -> None:
    table = Table(box=None, show_header=False, padding=(0, 3, 0, 0), pad_edge=False)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in rows:
        table.add_row(label, literal.markup(str(value)))
    console.print(Padding(table, (0, 0, 0, 2), expand=False))


def grid(console: Console, headers: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    table = Table(box=None, padding=(0, 3, 0, 0), pad_edge=False, header_style="dim")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(literal.markup("" if cell is None else str(cell)) for cell in row))
    console.print(Padding(table, (0, 0, 0, 2), expand=False))


def heading(console: Console, title: str, section: Any) -> bool:
    """Print a section title; False (and the reason) when the section is unavailable."""
    console.print(f"\n[bold]{title}[/bold]")
    why = missing(section)
    if why:
        console.print(f"  [yellow]unavailable:[/yellow] {literal.markup(why)}")
        return False
    return True


def show_host(console: Console, host: dict) -> None:
    if not heading(console, "Host", host):
        return
    c = host.get("container") or {}
    container = f"{c.get('runtime')} ({', '.join(c.get('markers', []))})" if c.get("detected") else "none detected"
    fields(console, [("hostname", host.get("hostname")), ("os", host.get("os")),
                     ("kernel", f"{host.get('kernel')} ({host.get('arch')})"),
                     ("cpus", f"{host.get('cpu_count')} ({host.get('cpus_usable')} usable by this process)"),
                     ("container", container)])


def show_software(console: Console, sw: dict) -> None:
    if not heading(console, "Software", sw):
        return
    torch, nccl = sw.get("torch") or {}, sw.get("nccl") or {}
    py = sw.get("python") or {}
    if missing(torch):
        torch_text = f"unavailable: {missing(torch)}"
    else:
        build = f"CUDA {torch['cuda']}" if torch.get("cuda") else f"ROCm {torch['hip']}" if torch.get("hip") else "CPU"
        torch_text = f"{torch.get('version')} ({build} build, {torch.get('location')})"
    built = torch.get("nccl_built_with")
    built_text = f"{built} ({torch.get('nccl_built_with_source')})" if built else \
        f"unavailable: {torch.get('nccl_built_with_unavailable') or missing(torch)}"
    if missing(nccl):
        loaded_text = f"unavailable: {missing(nccl)}"
    elif nccl.get("loaded_version"):
        loaded_text = f"{nccl['loaded_version']} from {nccl.get('loaded_from')} ({nccl.get('loaded_how')})"
    else:
        loaded_text = f"unavailable: {nccl.get('loaded_unavailable')}"
    wheels = ", ".join(f"{w['name']} {w['version']}" for w in sw.get("nccl_wheels") or []) or "none"
    fields(console, [("python", f"{py.get('version')} ({py.get('executable')})"), ("torch", torch_text),
                     ("NCCL torch was built with", built_text), ("NCCL torch loads", loaded_text),
                     ("nvidia-nccl wheels", wheels),
                     ("LD_LIBRARY_PATH", ":".join(sw.get("ld_library_path") or []) or "unset")])
    libs = nccl.get("libraries") or []
    if libs:
        grid(console, ("libnccl", "version", "found via"),
             [(lib["path"], lib.get("version") or f"? {lib.get('unavailable', '')}", ", ".join(lib["found_via"]))
              for lib in libs])
    elif not missing(nccl):
        console.print("  [dim]no libnccl.so* in torch's lib dir, nvidia-nccl wheels, LD_LIBRARY_PATH, ldconfig or "
                      "the usual system paths[/dim]")


def show_gpus(console: Console, gpus: dict) -> None:
    if not heading(console, "GPUs", gpus):
        return
    fields(console, [("driver", gpus.get("driver_version")), ("CUDA driver", gpus.get("cuda_driver_version")),
                     ("count", gpus.get("count"))])
    grid(console, ("index", "name", "memory", "bus id", "uuid"),
         [(d["index"], d["name"], f"{d['memory_total_mib']} MiB", d["bus_id"], d["uuid"])
          for d in gpus.get("devices", [])])


def show_network(console: Console, net: dict, env: dict) -> None:
    if not heading(console, "Network", net):
        return
    ifaces = net.get("interfaces") or []
    grid(console, ("interface", "state", "mtu", "speed", "addresses"),
         [(i["name"], ("UP" if i.get("up") else "DOWN") + ("" if i.get("running", True) or not i.get("up")
                                                         else " (no carrier)"),
           i.get("mtu"), f"{i['speed_mbps']} Mb/s" if i.get("speed_mbps") else "",
           ", ".join(a["address"] for a in i.get("addresses", [])) or "-") for i in ifaces])
    chosen = would_use(env, net)
    nccl, gloo = chosen["nccl"], chosen["gloo"]
    nccl_text = ", ".join(f"{i['name']} ({i['selected_address']['address']})" for i in nccl["interfaces"]) or "nothing"
    rows = [("NCCL would use", f"{nccl_text}  [{'NCCL_SOCKET_IFNAME=' + nccl['setting'] if nccl['setting'] else 'default order'}]")]
    host = net.get("hostname") or {}
    if gloo["setting"]:
        gloo_text = ", ".join(f"{i['name']} ({i['selected_address']['address']})" for i in gloo["interfaces"]) or "nothing"
        rows.append(("Gloo would use", f"{gloo_text}  [GLOO_SOCKET_IFNAME={gloo['setting']}]"))
    elif host.get("addresses"):
        loop = " (loopback)" if host.get("loopback_only") else ""
        rows.append(("Gloo would use", f"the address of host name {host.get('name')}: "
                                       f"{', '.join(host['addresses'])}{loop}"))
    master = net.get("master")
    if master:
        route = master.get("route") or {}
        if missing(route):
            rows.append(("MASTER_ADDR", f"{master.get('addr')}: {missing(route)}"))
        elif route:
            rows.append(("MASTER_ADDR", f"{master.get('addr')} -> {route.get('address')} via {route.get('interface')} "
                                        f"from {route.get('source_address')}"
                                        + (" (this host)" if route.get("local") else "")))
        listeners = master.get("listeners")
        if isinstance(listeners, list):
            rows.append(("MASTER_PORT", f"{master.get('port')}: " + (", ".join(
                f"in use by {l.get('process') or 'pid'} {l.get('pid') or ''}".strip() for l in listeners)
                or "free on this host")))
    fields(console, rows)


def show_infiniband(console: Console, ib: dict) -> None:
    if not heading(console, "InfiniBand / RoCE", ib):
        return
    devices = ib.get("devices", [])
    rows = [(d["name"], p.get("port"), p.get("state"), p.get("phys_state"), p.get("rate"), p.get("link_layer"),
             ", ".join(d.get("netdevs", [])), d.get("numa_node"))
            for d in devices for p in d.get("ports", [])]
    if not rows:
        console.print(f"  [dim]no RDMA devices (nothing in {literal.markup(ib.get('sysfs', '/sys/class/infiniband'))})[/dim]")
        return
    grid(console, ("device", "port", "state", "phys state", "rate", "link layer", "netdev", "NUMA"), rows)
    dev = ib.get("dev_infiniband") or {}
    fields(console, [("/dev/infiniband", ", ".join(dev.get("uverbs", [])) or "no uverbs devices" if dev.get("present")
                      else "missing")])


def nearest_nics(topo: dict) -> str:
    """'GPU0 mlx5_0 PIX, GPU1 mlx5_0 PHB': each GPU's closest RDMA NIC(s) in the matrix."""
    parts = []
    for gpu in topo.get("gpus", []):
        row = topo.get("matrix", {}).get(gpu, {})
        cells = [(distance_rank(cell), cell, name) for label, name in (topo.get("nics") or {}).items()
                 if (cell := row.get(label))]
        if cells:
            best = min(cells)[0]
            parts.append(f"{gpu} {'/'.join(n for r, _, n in cells if r == best)} {min(cells)[1]}")
    return ", ".join(parts) or "no RDMA NIC in the matrix"


def topology_rows(topo: dict) -> list[tuple[str, Any]]:
    if missing(topo):
        return [("topology", f"unavailable: {missing(topo)}")]
    gpus, nics, matrix = topo.get("gpus", []), topo.get("nics") or {}, topo.get("matrix", {})
    pairs = Counter(cell for i, a in enumerate(gpus) for b in gpus[i + 1:] if (cell := matrix.get(a, {}).get(b)))
    return [("topology", f"{len(gpus)} GPUs, {len(nics)} RDMA NICs ({topo.get('source')})"),
            ("nearest NIC", nearest_nics(topo)),
            ("GPU pairs", ", ".join(f"{cell} x{n}" for cell, n in sorted(pairs.items())) or "-")]


def fabric_row(fabric: dict) -> tuple[str, Any]:
    if missing(fabric):
        return "NVSwitch", f"unavailable: {missing(fabric)}"
    switch, process = fabric.get("nvswitch") or {}, fabric.get("fabric_manager_process")
    if not switch.get("present"):
        return "NVSwitch", "none"
    manager = {True: "running", False: "not running", None: "not checked"}[process]
    states = sorted({s.get("state") for s in (fabric.get("gpu_fabric_state") or {}).values()})
    return "NVSwitch", (f"{len(switch.get('pci') or switch.get('driver_devices') or [])} switch(es), "
                        f"nv-fabricmanager {manager}" + (f", GPU fabric state {'/'.join(states)}" if states else ""))


def xid_row(xid: dict) -> tuple[str, Any]:
    if missing(xid):
        return "Xid events", f"unavailable: {missing(xid)}"
    events = xid.get("events", [])
    codes = ", ".join(f"{x} x{n}" for x, n in sorted(Counter(e["xid"] for e in events).items()))
    when = "since boot (dmesg)" if xid.get("since_boot") else f"in {xid.get('source')} (this or earlier boots)"
    return "Xid events", f"{codes or 'none'} {when}"


def show_hardware(console: Console, hw: dict) -> None:
    if not heading(console, "Hardware (a summary: `nccl-doctor topo` shows all of it)", hw):
        return
    health = hw.get("gpu_health") or {}
    rows = topology_rows(hw.get("topology") or {}) + [fabric_row(hw.get("fabric") or {}), xid_row(hw.get("xid") or {})]
    if missing(health):
        rows.append(("GPU health", f"unavailable: {missing(health)}"))
    fields(console, rows)
    if health.get("gpus"):
        headers, rows = gpu_health_rows(health["gpus"], ("GPU", "bus id", "temp", "PCIe", "NVLinks up", "ECC uncorr.",
                                                         "throttle"))
        grid(console, headers, rows)


def show_limits(console: Console, limits: dict) -> None:
    if not heading(console, "Limits", limits):
        return
    nofile, memlock, shm = limits.get("nofile") or {}, limits.get("memlock") or {}, limits.get("shm") or {}
    shm_text = f"unavailable: {shm['unavailable']}" if "unavailable" in shm else \
        f"{size(shm.get('total_bytes'))} total, {size(shm.get('free_bytes'))} free"
    fields(console, [("open files (ulimit -n)", f"{nofile.get('soft')} (hard {nofile.get('hard')})"),
                     ("locked memory (ulimit -l)", f"{size(memlock.get('soft'))} (hard {size(memlock.get('hard'))})"),
                     ("/dev/shm", shm_text)])


def show_environment(console: Console, env_facts: dict) -> None:
    if not heading(console, "Environment (relevant variables, secrets redacted)", env_facts):
        return
    variables = env_facts.get("variables") or {}
    if variables:
        fields(console, list(variables.items()))
    else:
        console.print("  [dim]no NCCL_*, TORCH_*, GLOO_*, MASTER_*, RANK/WORLD_SIZE, CUDA_*, SLURM_*, OMPI_* "
                      "variables set[/dim]")
    for conf in env_facts.get("nccl_conf") or []:
        if conf.get("exists"):
            entries = [f"{e['name']}={e['value']}" for e in conf.get("entries", []) if "name" in e]
            text = conf.get("unavailable") or ("; ".join(entries) or "no settings")
            console.print(f"  [dim]{literal.markup(conf['path'])}:[/dim] {literal.markup(text)}")
        else:
            console.print(f"  [dim]{literal.markup(conf['path'])}: absent[/dim]")


def render_facts(facts: dict, env: dict, seconds: float, out: Any) -> None:
    console = console_for(out)
    with console.capture() as captured:
        print_facts(console, facts, env, seconds)
    out.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))  # no table padding at ends


def print_facts(console: Console, facts: dict, env: dict, seconds: float) -> None:
    host = facts.get("host") or {}
    console.print(f"[bold]nccl-doctor env[/bold]  host {literal.markup(str(host.get('hostname', '?')))}  "
                  f"[dim](collected in {seconds:.2f} s)[/dim]")
    show_host(console, facts.get("host"))
    show_software(console, facts.get("software"))
    show_gpus(console, facts.get("gpus"))
    show_network(console, facts.get("network"), env)
    show_infiniband(console, facts.get("infiniband"))
    show_hardware(console, facts.get("hardware"))
    show_limits(console, facts.get("limits"))
    show_environment(console, facts.get("environment"))


def draw_lint_header(stream: TextIO, facts: dict[str, Any], source: str) -> None:
    """What lint judged: the settings' source (and any nccl.conf read), on which host."""
    confs = [c["path"] for c in facts.get("environment", {}).get("nccl_conf", []) if c.get("exists")]
    extra = f" and {', '.join(confs)}" if confs else ""
    host = str(facts.get("host", {}).get("hostname", "?"))
    console_for(stream).print(f"[dim]checked {literal.markup(source + extra)} on host {literal.markup(host)}[/dim]")
