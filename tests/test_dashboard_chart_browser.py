"""The dashboard's chart measured in headless Chromium (dashboard/browser.py), with the browser's own
fonts: on a one-row chart and on a reference-shaped night the y tick labels never touch the axis
title, the outlier is clipped at the top edge with its value written inside the chart, and the
kept labels never cover one another."""
import json

from dashboard.browser import Chromium
from dashboard.chart import progress_svg
from dashboard.data import read_results
from dashboard.runview import noise_band
from harness.results import append_result, init_results
from tests.test_report_progress import OUTLIER, night

# The boxes of the chart's parts, as the browser lays them out.
MEASURE = """(() => Array.from(document.querySelectorAll('svg.progress')).map(svg => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const texts = sel => Array.from(svg.querySelectorAll(sel));
  return {
    svg: box(svg),
    title: box(texts('text.axis').find(t => t.textContent.startsWith('val_bpb'))),
    yticks: texts('text.tick[text-anchor="end"]').map(box),
    labels: texts('text.label').map(t => {   // the rotated label's own rectangle, its corners on screen
      const b = t.getBBox(), m = t.getScreenCTM();
      return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
        .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
    }),
    clipped: texts('text.clipped-value').map(t => [t.textContent, box(t)]),
  };
}))()"""


def overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def quads_overlap(p, q) -> bool:
    """Two convex quadrilaterals (rotated text boxes) intersect: no edge of either separates them."""
    for poly in (p, q):
        for k in range(4):
            (x0, y0), (x1, y1) = poly[k], poly[(k + 1) % 4]
            nx, ny = y1 - y0, x0 - x1
            a = [nx * x + ny * y for x, y in p]
            b = [nx * x + ny * y for x, y in q]
            if max(a) <= min(b) or max(b) <= min(a):
                return False
    return True


def test_the_chart_in_chromium(tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    init_results(one / "results.tsv")
    append_result(one / "results.tsv", "aaaaaaa", 3.2686, 1.0, "keep", "baseline")
    big = tmp_path / "big"
    big.mkdir()
    night(big / "results.tsv")
    svgs = []
    for run in (one, big):
        lines = read_results(run / "results.tsv").lines
        svgs.append(progress_svg(lines, noise_band(lines, [])))
    page = tmp_path / "chart.html"
    page.write_text("<!doctype html><html><body style='margin:0;width:1100px'>" + "".join(
        f"<div style='width:1100px'>{s}</div>" for s in svgs) + "</body></html>")
    with Chromium(width=1100, height=1000) as browser:
        browser.open(page.as_uri())
        got = browser.evaluate(f"JSON.stringify({MEASURE})")
    charts = json.loads(got)
    assert len(charts) == 2
    for chart in charts:
        assert chart["yticks"], "y ticks drawn"
        hit = [t for t in chart["yticks"] if overlap(t, chart["title"])]
        assert not hit, f"y tick labels {hit} run into the axis title {chart['title']}"
        assert chart["title"][0] >= chart["svg"][0], "the axis title is inside the chart"
    night_chart = charts[1]
    values = dict((text, box) for text, box in night_chart["clipped"])
    assert "3.216" in values, night_chart["clipped"]   # the 3.215849 discard, at the top edge
    box, frame = values[f"{OUTLIER:.3f}"], night_chart["svg"]
    assert frame[0] <= box[0] and box[2] <= frame[2] and frame[1] <= box[1] and box[3] <= frame[3]
    labels = night_chart["labels"]
    assert len(labels) >= 8
    hit = [(i, j) for i in range(len(labels)) for j in range(i + 1, len(labels)) if quads_overlap(labels[i], labels[j])]
    assert not hit, f"kept labels cover one another: {hit}"
