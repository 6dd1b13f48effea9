"""A report as one self-contained HTML page: findings first, then charts, heatmaps and tables.

No script, no stylesheet or font from elsewhere: the charts are SVG drawn here, so the page works
offline, from a mail attachment or a CI artifact. Whatever a command put in the report's facts is
shown when this module knows it (bench's `sweep` and `matrix`, the ranks); findings always are.
"""

from __future__ import annotations

import math
import re
from . import literal
from typing import Any

from ..model import Report, ranges

SERIES_COLOURS = {"out-of-place": "#2563eb", "in-place": "#ea580c"}
SEVERITY_COLOURS = {"error": "#b91c1c", "warning": "#b45309", "info": "#0e7490"}
LAYOUTS = ("out-of-place", "in-place")

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#111827;
background:#f8fafc}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:32px 0 12px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}
.verdict{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600}
.verdict.ok{background:#15803d}.verdict.warning{background:#b45309}.verdict.error{background:#b91c1c}
.meta{color:#4b5563}.finding{background:#fff;border:1px solid #e5e7eb;border-left:6px solid;border-radius:6px;
padding:10px 14px;margin:10px 0}.finding h3{font-size:15px;margin:0 0 4px}
.finding .sev{font-weight:700;margin-right:6px}
.finding ul{margin:4px 0 0 18px;padding:0}.finding li{margin:2px 0}.evidence{font:12px/1.4 ui-monospace,monospace;color:#374151}
.fix{color:#166534}code{font:12px ui-monospace,monospace;background:#f1f5f9;padding:0 3px;border-radius:3px}
.charts{display:flex;flex-wrap:wrap;gap:14px}
figure{margin:0;background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px}
figcaption{font-weight:600;padding:2px 6px}svg text{font:11px system-ui,sans-serif;fill:#374151}
pre{background:#0f172a;color:#e2e8f0;padding:12px;border-radius:6px;overflow:auto;font:12px/1.35 ui-monospace,monospace}
table.timings{border-collapse:collapse;background:#fff}table.timings th,table.timings td{border:1px solid #e5e7eb;
padding:3px 8px;text-align:right;font-variant-numeric:tabular-nums}table.timings th{background:#f1f5f9}
td.bar{background-repeat:no-repeat}td.slowest{font-weight:700}
"""


def render_html(report: Report) -> str:
    data = report.to_json()
    facts = report.facts
    parts = [_header(data, facts), _findings(data["findings"])]
    if facts.get("sweep", {}).get("rows"):
        parts.append(_sweep(facts["sweep"]))
    if facts.get("matrix", {}).get("links"):
        parts.append(_matrix(facts["matrix"]))
    if facts.get("sweep", {}).get("rows"):
        parts.append(_rank_timings(facts["sweep"], facts.get("ranks", [])))
    title = f"nccl-doctor {report.command}: {data['verdict']}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{literal.html(title)}</title><style>{STYLE}</style></head>\n"
            f"<body><main>\n{''.join(parts)}\n<p class=\"meta\">nccl-doctor {literal.html(data['version'])}</p>"
            f"</main></body></html>\n")


# ------------------------------------------------------------------ header and findings

def _header(data: dict, facts: dict) -> str:
    world = facts.get("world", {})
    hosts = world.get("hosts", {})
    line = []
    if world:
        line.append(f"{world.get('size', '?')} ranks on {len(hosts)} host{'s' if len(hosts) != 1 else ''}")
    if world.get("backend"):
        line.append(f"backend {world['backend']}")
    sweep = facts.get("sweep")
    if sweep:
        s = sweep["settings"]
        line.append(f"-b {s['minbytes']} -e {s['maxbytes']} -f {s['stepfactor']} -n {s['iters']} "
                    f"-w {s['warmup_iters']} -c {s['check']} -d {s['datatype']} -o {s['op']} -r {s['root']}; "
                    f"time across ranks: {s['average_means']}")
    return (f"<header><h1>nccl-doctor {literal.html(data['command'])}</h1>"
            f"<span class=\"verdict {literal.html(data['verdict'])}\">{literal.html(data['verdict'])}</span> "
            f"<span class=\"meta\">{literal.html('; '.join(line))}</span></header>\n")


def _inline(text: str) -> str:
    """Escape, then show `backquoted` spans as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", literal.html(text))


def _findings(findings: list[dict]) -> str:
    if not findings:
        return '<section id="findings"><h2>Findings</h2><p>No problems found.</p></section>\n'
    return ('<section id="findings"><h2>Findings</h2>' + "".join(_finding(f) for f in findings)
            + "</section>\n")


def _finding(f: dict) -> str:
    colour = SEVERITY_COLOURS.get(f["severity"], "#374151")
    where = []
    if f["hosts"]:
        where.append("hosts " + ", ".join(f["hosts"]))
    if f["ranks"]:
        where.append("ranks " + ranges(f["ranks"]))
    evidence = "".join(f'<li class="evidence">{literal.html(e["source"])}: {literal.html(e["text"])}</li>'
                       for e in f["evidence"][:8])
    fixes = "".join(f'<li class="fix">{_inline(step)}</li>' for step in f["fix"])
    secondary = "".join(_finding(s) for s in f.get("secondary", []))
    return (f'<div class="finding" style="border-left-color:{colour}">'
            f'<h3><span class="sev" style="color:{colour}">{literal.html(f["severity"].upper())}</span>'
            f'[{literal.html(f["cause"])}] {literal.html(f["title"])}</h3><div>{literal.html(f["message"])}</div>'
            f'<div class="meta">{literal.html(f["category"])}; confidence {f["confidence"]:.2f}'
            f'{"; " + literal.html("; ".join(where)) if where else ""}</div>'
            f'{"<ul>" + evidence + "</ul>" if evidence else ""}{"<ul>" + fixes + "</ul>" if fixes else ""}'
            f"{secondary}</div>")


# ------------------------------------------------------------------ sweep: charts and tables

def _sweep(sweep: dict) -> str:
    from .bench import sweep_text

    figures = []
    for name in sweep["collectives"]:
        rows = [r for r in sweep["rows"] if r["collective"] == name]
        if not rows:
            continue
        series = {layout: [(r["size"], r[layout]["busbw"]) for r in rows if r.get(layout)] for layout in LAYOUTS}
        avg = sweep["avg_busbw"].get(name)
        caption = f"{name}: busbw (GB/s) vs size" + (f"; avg {avg:.3g} GB/s" if avg is not None else "")
        figures.append(f'<figure class="chart" data-collective="{literal.html(name)}">'
                       f'<figcaption>{literal.html(caption)}'
                       f"</figcaption>{line_chart({k: v for k, v in series.items() if v}, 'busbw (GB/s)')}</figure>")
    return ('<section id="sweep"><h2>Bus bandwidth by message size</h2><div class="charts">' + "".join(figures)
            + "</div><details><summary>nccl-tests tables</summary><pre>" + literal.html(sweep_text(sweep))
            + "</pre></details></section>\n")


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _size_label(n: float) -> str:
    n = int(n)
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return str(n)


def line_chart(series: dict[str, list[tuple[float, float]]], y_label: str, width: int = 540, height: int = 290) -> str:
    """An SVG line chart, x on a log2 scale (message size), y linear from 0."""
    left, right, top, bottom = 62, 14, 26, 46
    xs = [x for points in series.values() for x, _ in points if x > 0]
    ys = [y for points in series.values() for _, y in points]
    if not xs:
        return '<svg width="0" height="0"></svg>'
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    hi = hi if hi > lo else lo + 1
    step_y = _nice_step(max(ys) if max(ys) > 0 else 1.0)
    top_y = step_y * math.ceil((max(ys) or 1.0) / step_y)
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (math.log2(x) - lo) / (hi - lo) * plot_w

    def py(y: float) -> float:
        return top + plot_h - y / top_y * plot_h

    out = [f'<svg width="{width}" height="{height}" role="img" '
           f'viewBox="0 0 {width} {height}"><rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    y = 0.0
    while y <= top_y + 1e-12:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#e5e7eb"/>'
                   f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        y += step_y
    every = max(1, math.ceil((hi - lo) / 8))
    for power in range(math.ceil(lo), math.floor(hi) + 1, every):
        x = px(2 ** power)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#f1f5f9"/>'
                   f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{_size_label(2 ** power)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#9ca3af"/>'
               f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#9ca3af"/>'
               f'<text x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle">message size (bytes)</text>'
               f'<text transform="translate(14 {top + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle">'
               f"{literal.html(y_label)}</text>")
    for index, (name, points) in enumerate(series.items()):
        colour = SERIES_COLOURS.get(name, "#059669")
        coords = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in points if x > 0)
        out.append(f'<polyline class="series" data-series="{literal.html(name)}" fill="none" stroke="{colour}" '
                   f'stroke-width="2" points="{coords}"/>')
        for x, v in points:
            if x > 0:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}">'
                           f"<title>{literal.html(name)} {_size_label(x)}B: {v:.3g} GB/s</title></circle>")
        out.append(f'<rect x="{left + 10 + index * 120}" y="8" width="12" height="4" fill="{colour}"/>'
                   f'<text x="{left + 26 + index * 120}" y="14">{literal.html(name)}</text>')
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------ link matrix heatmaps

def _matrix(matrix: dict) -> str:
    from ..rules.links import rate_text

    labels = [n["label"] for n in matrix["nodes"]]
    bandwidth: dict[tuple[str, str], float] = {}
    latency: dict[tuple[str, str], float] = {}
    for link in matrix["links"]:
        bandwidth[(link["a"], link["b"])], bandwidth[(link["b"], link["a"])] = link["ab_Bps"], link["ba_Bps"]
        latency[(link["a"], link["b"])] = latency[(link["b"], link["a"])] = link["latency_us"]
    rates = "; ".join(f"{n['label']}: {n['line_gbps']:g} Gbit/s via {n['via']}" if n.get("line_gbps")
                      else f"{n['label']}: {n['via'] or 'unknown'}" for n in matrix["nodes"])
    return ('<section id="matrix"><h2>Link matrix</h2>'
            f'<p class="meta">{len(matrix["links"])} links measured in {matrix["rounds"]} round-robin rounds of '
            f'disjoint pairs, {_size_label(matrix["message_bytes"])}B messages. Rows send to columns. '
            f"Line rates reported: {literal.html(rates)}</p><div class=\"charts\">"
            f'<figure><figcaption>bandwidth</figcaption>{heatmap(labels, bandwidth, rate_text, True)}</figure>'
            f'<figure><figcaption>latency, one way (us)</figcaption>'
            f'{heatmap(labels, latency, lambda v: f"{v:.1f}", False)}</figure></div></section>\n')


def _colour(share: float) -> str:
    """0 -> red, 0.5 -> amber, 1 -> green."""
    stops = [(0.0, (215, 48, 39)), (0.5, (253, 224, 139)), (1.0, (26, 152, 80))]
    share = min(1.0, max(0.0, share))
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if share <= b:
            t = (share - a) / (b - a)
            return "#%02x%02x%02x" % tuple(round(x + (y - x) * t) for x, y in zip(ca, cb))
    return "#1a9850"


def heatmap(labels: list[str], values: dict[tuple[str, str], float], fmt: Any, high_is_good: bool) -> str:
    """Cells coloured by their value against the best one (the largest bandwidth, the smallest latency)."""
    cell_w, cell_h, left = 92, 34, max(70, 8 * max(len(x) for x in labels))
    top = 30
    width, height = left + cell_w * len(labels) + 8, top + cell_h * len(labels) + 8
    present = [v for v in values.values() if v > 0]
    best = (max(present) if high_is_good else min(present)) if present else 1.0
    out = [f'<svg class="heatmap" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}"><rect width="{width}" height="{height}" fill="#fff"/>']
    for j, b in enumerate(labels):
        out.append(f'<text x="{left + j * cell_w + cell_w / 2:.0f}" y="{top - 10}" text-anchor="middle">'
                   f"{literal.html(b)}</text>")
    for i, a in enumerate(labels):
        y = top + i * cell_h
        out.append(f'<text x="{left - 8}" y="{y + cell_h / 2 + 4:.0f}" text-anchor="end">{literal.html(a)}</text>')
        for j, b in enumerate(labels):
            x = left + j * cell_w
            value = values.get((a, b))
            if value is None:
                out.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="#e5e7eb"/>')
                continue
            share = (value / best if high_is_good else best / value) if value > 0 and best > 0 else 0.0
            out.append(f'<rect class="cell" x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" '
                       f'fill="{_colour(share)}"><title>{literal.html(a)} -> {literal.html(b)}: '
                       f'{literal.html(fmt(value))}</title></rect>'
                       f'<text x="{x + cell_w / 2 - 1:.0f}" y="{y + cell_h / 2 + 4:.0f}" text-anchor="middle" '
                       f'style="fill:#111827">{literal.html(fmt(value))}</text>')
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------ per-rank timings

def _rank_timings(sweep: dict, ranks: list[dict]) -> str:
    """Each rank's own time at each collective's largest size: the report takes their max (by default)."""
    host = {r["rank"]: r["host"] for r in ranks}
    columns = []
    for name in sweep["collectives"]:
        rows = [r for r in sweep["rows"] if r["collective"] == name]
        if rows:
            last = rows[-1]
            layout = next(l for l in LAYOUTS if last.get(l))
            columns.append((f"{name} {_size_label(last['size'])}B {layout}", last[layout]["rank_us"]))
    count = max((len(times) for _, times in columns), default=0)
    head = "<tr><th>rank</th><th>host</th>" + "".join(f"<th>{literal.html(title)} (us)</th>" for title, _ in columns)
    body = []
    for rank in range(count):
        cells = []
        for _, times in columns:
            value, slowest = times[rank], max(times)
            share = value / slowest if slowest > 0 else 0.0
            style = f"background-image:linear-gradient(90deg,#bfdbfe {share * 100:.0f}%,transparent {share * 100:.0f}%)"
            cls = "bar slowest" if value == slowest and len(times) > 1 else "bar"
            cells.append(f'<td class="{cls}" style="{style}">{value:.1f}</td>')
        body.append(f"<tr><td>{rank}</td><td>{literal.html(str(host.get(rank, '?')))}</td>{''.join(cells)}</tr>")
    return ('<section id="ranks"><h2>Per-rank timings</h2><p class="meta">Each rank\'s own time per iteration at '
            "the largest size; the tables report the "
            f"{literal.html(sweep['settings']['average_means'])} across ranks. "
            "The slowest rank of each column is in bold."
            f'</p><table class="timings">{head}{"".join(body)}</table></section>\n')

