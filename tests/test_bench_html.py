"""The HTML report: one self-contained page, checked as text and in a real headless Chromium.

Chromium (Debian's `chromium` package; CI: `apt-get install -y chromium`) loads a copy of the page with
an error hook, dumps the DOM (no script error, no failed load, every SVG laid out with a size) and
takes a screenshot, kept with the test's files and copied to bench/out/ (git-ignored) for a look.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nccl_doctor.model import Evidence, Finding, Report
from nccl_doctor.render.html import render_html

OUT = Path(__file__).parents[1] / "bench" / "out"
HOOK = """<script>
(function () {
  var root = document.documentElement;
  function note(what) { root.setAttribute('data-errors', (root.getAttribute('data-errors') || '') + '|' + what); }
  window.addEventListener('error', function (e) {
    note(e.message || (e.target && (e.target.src || e.target.href)) || 'load error');
  }, true);
  var original = console.error;
  console.error = function () { note(Array.prototype.join.call(arguments, ' ')); original.apply(console, arguments); };
  window.addEventListener('load', function () {
    var drawn = 0;
    document.querySelectorAll('svg').forEach(function (s) {
      var box = s.getBoundingClientRect();
      if (box.width > 0 && box.height > 0 && s.querySelector('polyline, rect.cell')) { drawn++; }
    });
    root.setAttribute('data-drawn', String(drawn));
  });
})();
</script>"""


def sample_report() -> Report:
    sizes = [1 << k for k in range(10, 21)]
    rows = []
    for name, layouts in (("all_reduce", ("in-place",)), ("all_gather", ("out-of-place", "in-place"))):
        for i, size in enumerate(sizes):
            cells = {layout: {"time_us": 50.0 + size / 1e3, "algbw": i * 0.9, "busbw": i * 1.1 + (j * 0.3),
                              "wrong": 0, "rank_us": [40.0 + r * 5 + size / 1e3 for r in range(4)]}
                     for j, layout in enumerate(layouts)}
            rows.append({"collective": name, "size": size, "count": size // 4, "type": "float",
                         "redop": "sum" if name == "all_reduce" else "none", "root": -1,
                         "out-of-place": cells.get("out-of-place"), "in-place": cells.get("in-place")})
    hosts = ["h1", "h2", "h3", "h4"]
    links = [{"a": a, "b": b, "ab_Bps": 2.4e6 if a == "h3" else 1.1e9, "ba_Bps": 2.4e6 if b == "h3" else 1.2e9,
              "latency_us": 60.0} for i, a in enumerate(hosts) for b in hosts[i + 1:]]
    facts = {
        "world": {"size": 4, "hosts": {h: [i] for i, h in enumerate(hosts)}, "backend": "gloo"},
        "ranks": [{"rank": i, "host": h, "pid": 100 + i, "local_rank": 0} for i, h in enumerate(hosts)],
        "sweep": {"settings": {"minbytes": 1024, "maxbytes": 1 << 20, "stepfactor": 2, "stepbytes": 1 << 20,
                               "iters": 20, "warmup_iters": 5, "datatype": "float", "op": "sum", "root": 0, "check": 1,
                               "average": 3, "average_means": "max"},
                  "backend": "gloo", "ranks": 4, "collectives": ["all_reduce", "all_gather"], "rows": rows,
                  "avg_busbw": {"all_reduce": 5.5, "all_gather": 5.7}},
        "matrix": {"scope": "hosts", "message_bytes": 1 << 20, "rounds": 3, "retested": [],
                   "nodes": [{"label": h, "rank": i, "host": h, "line_gbps": 10.0, "via": "data0 (10000 Mb/s)"}
                             for i, h in enumerate(hosts)], "links": links},
    }
    finding = Finding("slow-host", "error", "h3 is slow on all 3 of its links: 2.4 MB/s <script>alert(1)</script>",
                      ranks=[2], hosts=["h3"], evidence=[Evidence("link matrix", "h3 -> h1 2.4 MB/s")],
                      fix=["On h3: `tc qdisc show dev data0` (traffic shaping)."])
    return Report("bench", [finding], facts)


def test_page_is_self_contained_and_shows_everything():
    page = render_html(sample_report())
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 4  # 2 charts, 2 heatmaps
    assert not re.search(r"""(src|href)\s*=|<link|@import|url\(|<script""", page)  # nothing fetched, no script
    assert page.index('id="findings"') < page.index('id="sweep"') < page.index('id="matrix"') < page.index('id="ranks"')
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # text is escaped
    assert "<code>tc qdisc show dev data0</code>" in page
    assert page.count('class="cell"') == 2 * 12  # bandwidth and latency: 4 x 4 minus the diagonal
    assert page.count('class="series"') == 3  # all_reduce in place; all_gather both ways


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run_chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    browser = chromium()
    return subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0",
                           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", *args],
                          capture_output=True, text=True, timeout=90)


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_page_loads_without_errors_and_charts_render_in_chromium(tmp_path):
    page = render_html(sample_report())
    plain, hooked = tmp_path / "report.html", tmp_path / "hooked.html"
    plain.write_text(page)
    hooked.write_text(page.replace("<head>", "<head>" + HOOK, 1))

    dom = run_chromium(["--dump-dom", hooked.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    root = re.search(r"<html[^>]*>", dom.stdout).group(0)
    assert "data-errors" not in root, root
    assert 'data-drawn="4"' in root, root  # every chart and heatmap has a size and its marks

    shot = tmp_path / "report.png"
    done = run_chromium(["--window-size=1280,2200", f"--screenshot={shot}", plain.as_uri()], tmp_path)
    assert done.returncode == 0 and shot.stat().st_size > 30_000, done.stderr[-2000:]
    assert ":CONSOLE" not in done.stderr, done.stderr  # Chromium logs page console messages this way
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, OUT / "bench_report.png")
