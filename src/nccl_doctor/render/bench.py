"""Bench results as text: nccl-tests' own table (same columns, widths and footer), and the link matrix.

The table streams: each row is printed as soon as the judge has it (`SweepStream`, fed by the judge's
events), as nccl-tests prints its rows; the report's facts give the same table again (`sweep_text`,
for the HTML report and for a report read later) and the link matrix.
"""

from __future__ import annotations

from typing import TextIO

from ..model import Report
from ..rules.links import rate_text

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


def collective_header(name: str) -> list[str]:
    return [f"# {name}",
            f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place          ",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
            f"{'busbw':>6} {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}",
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  "
            f"{'':>5}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}"]


def row_line(r: dict) -> str:
    return (f"{r['size']:12d}  {r['count']:12d}  {r['type']:>8}  {r['redop']:>6}  {r['root']:6d}"
            + "".join(_cell(r.get(layout)) for layout in LAYOUTS))


def collective_footer(rows: list[dict], avg_busbw: float | None) -> list[str]:
    errors = sum(1 for r in rows for layout in LAYOUTS if r.get(layout) and r[layout]["wrong"])
    return [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
            f"# Avg bus bandwidth    : {avg_busbw:g}" if avg_busbw is not None else "# Avg bus bandwidth    : N/A",
            "#"]


def collective_table(name: str, rows: list[dict], avg_busbw: float | None) -> list[str]:
    """One collective as its nccl-tests binary (NAME_perf) prints it."""
    return collective_header(name) + [row_line(r) for r in rows] + collective_footer(rows, avg_busbw)


class SweepStream:
    """nccl-tests' table, a line at a time as the judge measures it (events "sweep.start", "sweep.row",
    "sweep.collective" with that collective's average); `rows` is what was printed."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.rows, self.current = out, [], None

    def measured(self, kind: str, item: dict) -> None:
        if kind == "sweep.start":
            self._write(sweep_header(item))
        elif kind == "sweep.row":
            if item["collective"] != self.current:
                self.current = item["collective"]
                self._write(collective_header(self.current))
            self.rows.append(item)
            self._write([row_line(item)])
        elif kind == "sweep.collective":
            self._write(collective_footer([r for r in self.rows if r["collective"] == item["collective"]],
                                          item["avg_busbw"]))

    def _write(self, lines: list[str]) -> None:
        self.out.write("".join(line + "\n" for line in lines))
        self.out.flush()


def render_bench(report: Report, out: TextIO, streamed: bool) -> None:
    """What the report adds to the streamed table: the sweep if it was not streamed, the link matrix, why a
    part was not measured."""
    facts = report.facts
    if not streamed and facts.get("sweep", {}).get("rows"):
        out.write(sweep_text(facts["sweep"]) + "\n")
    if facts.get("matrix", {}).get("links"):
        out.write(matrix_text(facts["matrix"]) + "\n")
    for stage in facts.get("stages", []):
        if stage["name"] in ("sweep", "matrix") and stage["status"] == "skipped" and "not asked" not in stage["detail"]:
            out.write(f"# {stage['title']}: not measured: {stage['detail']}\n")
    if facts.get("interrupted"):
        out.write(f"# interrupted: {len((facts.get('sweep') or {}).get('rows') or [])} sizes measured\n")
    out.write("\n")


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
