"""Bench results as text: nccl-tests' own table (same columns, widths and footer), and the link matrix.

Both the terminal output and the HTML report print these, from the report's facts only.
"""

from __future__ import annotations

from .links import rate_text

LAYOUTS = ("out-of-place", "in-place")


def time_text(us: float) -> str:
    """nccl-tests' time column: fewer decimals as the figure grows."""
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def _cell(result: dict | None) -> str:
    if result is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>5}"
    wrong = "N/A" if result["wrong"] is None else str(result["wrong"])
    return f"  {time_text(result['time_us'])}  {result['algbw']:6.2f}  {result['busbw']:6.2f}  {wrong:>5}"


def sweep_header(sweep: dict) -> list[str]:
    s = sweep["settings"]
    step = f"{s['stepfactor']}(factor)" if s["stepfactor"] > 1 else f"{s['stepbytes']}(bytes)"
    return [f"# nccl-doctor bench: {sweep['ranks']} ranks, backend {sweep['backend']}",
            f"# minBytes {s['minbytes']} maxBytes {s['maxbytes']} step: {step} warmup iters: {s['warmup_iters']} "
            f"iters: {s['iters']} validation: {s['check']} time across ranks: {s['average_means']} (-a {s['average']})",
            "#"]


def collective_table(name: str, rows: list[dict], avg_busbw: float | None) -> list[str]:
    """One collective as its nccl-tests binary (NAME_perf) prints it."""
    lines = [f"# {name}",
             f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place          ",
             f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
             f"{'busbw':>6} {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}",
             f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  "
             f"{'':>5}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}"]
    for r in rows:
        lines.append(f"{r['size']:12d}  {r['count']:12d}  {r['type']:>8}  {r['redop']:>6}  {r['root']:6d}"
                     + "".join(_cell(r.get(layout)) for layout in LAYOUTS))
    errors = sum(1 for r in rows for layout in LAYOUTS if r.get(layout) and r[layout]["wrong"])
    lines += [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
              f"# Avg bus bandwidth    : {avg_busbw:g}" if avg_busbw is not None else "# Avg bus bandwidth    : N/A",
              "#"]
    return lines


def sweep_text(sweep: dict) -> str:
    lines = sweep_header(sweep)
    for name in sweep["collectives"]:
        rows = [r for r in sweep["rows"] if r["collective"] == name]
        if rows:
            lines += collective_table(name, rows, sweep["avg_busbw"].get(name))
    return "\n".join(lines)


def matrix_text(matrix: dict) -> str:
    """Bandwidth from each row's node to each column's node, and one-way latency, as two grids."""
    labels = [n["label"] for n in matrix["nodes"]]
    bandwidth, latency = {}, {}
    for link in matrix["links"]:
        bandwidth[(link["a"], link["b"])], bandwidth[(link["b"], link["a"])] = link["ab_Bps"], link["ba_Bps"]
        latency[(link["a"], link["b"])] = latency[(link["b"], link["a"])] = link["latency_us"]
    width = max(12, *(len(x) + 2 for x in labels))
    corner = "from \\ to"
    head = f"{corner:<{width}}" + "".join(f"{x:>{width}}" for x in labels)
    lines = [f"# link matrix ({matrix['scope']}): {len(matrix['links'])} links in {matrix['rounds']} rounds, "
             f"{matrix['message_bytes']} B messages", "# bandwidth (row sends to column)", head]
    for a in labels:
        lines.append(f"{a:<{width}}" + "".join(
            f"{(rate_text(bandwidth[(a, b)]) if (a, b) in bandwidth else '-'):>{width}}" for b in labels))
    lines += ["# latency, one way (us)", head]
    for a in labels:
        lines.append(f"{a:<{width}}" + "".join(
            f"{(f'{latency[(a, b)]:.1f}' if (a, b) in latency else '-'):>{width}}" for b in labels))
    rates = [f"{n['label']} {n['line_gbps']:g} Gbit/s via {n['via']}" if n.get("line_gbps") else
             f"{n['label']} {n['via'] or 'unknown'}" for n in matrix["nodes"]]
    lines.append("# line rates reported: " + "; ".join(rates))
    return "\n".join(lines)
