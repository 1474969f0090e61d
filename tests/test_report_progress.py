"""progress.png (agent/report_progress.py) on a night shaped like the reference's published one and
on a smoke-sized run: a staircase of kept steps, discards faint, an outlier clipped and marked at
the edge with its value, labels that never overlap, whole experiment numbers, a legend off the
points; and the same points, running best and y range as the dashboard's chart (dashboard/chart.py).

The results.tsv files are written by the project's own writer (harness/results.py). The figures
are the matplotlib objects the PNG is saved from, measured after drawing."""
import random
import re
import struct
import subprocess
import sys
import zlib

import pytest

from agent import report_progress
from dashboard.chart import progress_svg
from dashboard.runview import noise_band
from harness.results import append_result, init_results, read_results
from tests.loop_fixtures import REPO

BASELINE, BEST = 0.9979, 0.9697
OUTLIER_N, OUTLIER = 89, 3.215849
# Where the 24 kept steps after the baseline fall: many early, few late (a night's shape).
KEPT_AT = (2, 3, 5, 6, 7, 8, 9, 11, 12, 14, 22, 30, 38, 41, 67, 69, 80, 95, 103, 105, 106, 107, 112, 119)
CRASH_AT = (16, 50, 77, 99)
IDEAS = ("warmup 2% of the steps", "matrix LR 0.04 to 0.05", "depth 10 with a narrower MLP (3x instead of 4x)",
         "value embeddings on every other layer", "logit softcap 15 to 12", "Adam beta2 0.95 to 0.98",
         "sliding window of 512 on 3 of 4 layers", "weight decay 0.1 on embeddings only")


def night(path, n=126, seed=0) -> list[tuple]:
    """A 126-experiment results.tsv like the reference's published run: a staircase from 0.9979
    to 0.9697 in 25 keeps, 97 discards a little above the running best, 4 crashes, and one
    discard at 3.2 (a broken edit). Returns the rows (n, value, status, description)."""
    rnd = random.Random(seed)
    weights = [0.8 ** k * rnd.uniform(0.5, 1.5) for k in range(len(KEPT_AT))]
    steps = iter(w / sum(weights) * (BASELINE - BEST) for w in weights)
    best, rows = BASELINE, [(1, BASELINE, "keep", "baseline")]
    for i in range(2, n + 1):
        if i in KEPT_AT:
            best -= next(steps)
            rows.append((i, best, "keep", rnd.choice(IDEAS)))
        elif i in CRASH_AT:
            rows.append((i, 0.0, "crash", "batch 96K (assert: not divisible by the device batch)"))
        elif i == OUTLIER_N:
            rows.append((i, OUTLIER, "discard", "tie the embedding and unembedding (broken)"))
        else:
            rows.append((i, best + 0.0002 + abs(rnd.gauss(0, 0.002)), "discard", rnd.choice(IDEAS)))
    init_results(path)
    for i, v, status, desc in rows:
        append_result(path, f"{i:07x}", v, 60.2, status, desc)
    return rows


def drawn(fig):
    """The figure's parts after drawing: axes, renderer, texts by gid, scatter sets by legend label."""
    fig.canvas.draw()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    texts = {}
    for t in ax.texts:
        texts.setdefault(t.get_gid(), []).append(t)
    sets = {c.get_label().split(" (")[0]: {round(float(x)) for x, _ in c.get_offsets()} for c in ax.collections
            if not c.get_label().startswith("_")}
    return ax, renderer, texts, sets


def overlapping(boxes):
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


def svg_points(svg):
    """{status or "clipped": {n}} of the dashboard's chart, read from each point's shape and title."""
    out = {}
    for cls, clip, n in re.findall(r'class="pt (keep|discard|crash)( clipped)?"[^>]*/>(?:<text[^<]*</text>)?'
                                   r'<title>#(\d+) ', svg):
        out.setdefault("clipped" if clip else cls, set()).add(int(n))
    return out


def png_title(path) -> str:
    """The Title text chunk of a PNG (matplotlib writes the metadata it is given as tEXt)."""
    data, pos = path.read_bytes(), 8
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        if kind == b"tEXt" and body.startswith(b"Title\0"):
            return body[6:].decode("latin-1")
        if kind == b"zTXt" and body.startswith(b"Title\0"):
            return zlib.decompress(body[7:]).decode("latin-1")
        if kind == b"iTXt" and body.startswith(b"Title\0"):
            return body.split(b"\0", 5)[-1].decode("utf-8")
        pos += 12 + size
    return ""


def test_a_reference_shaped_night_reads_like_the_notebook_figure(tmp_path):
    run = tmp_path / "mar8"
    run.mkdir()
    rows = night(run / "results.tsv")
    kept = [r for r in rows if r[2] == "keep"]
    assert (len(rows), len(kept), sum(r[2] == "crash" for r in rows)) == (126, 25, 4)
    ax, renderer, texts, sets = drawn(report_progress.figure(run, "a night"))
    lo, hi = ax.get_ylim()
    # The progress fills the plot: the 3.2 is clipped, not the top of the scale.
    assert lo < BEST and hi > BASELINE and (BASELINE - BEST) / (hi - lo) > 0.7, (lo, hi)
    assert OUTLIER_N in sets["clipped"] and OUTLIER_N not in sets["discarded"]
    clip = next(c for c in ax.collections if c.get_label().startswith("clipped"))
    assert any(round(x) == OUTLIER_N and y == pytest.approx(hi) for x, y in clip.get_offsets()), "at the top edge"
    value = [t for t in texts["clipped-value"] if t.xy[0] == OUTLIER_N]
    assert value and value[0].get_text() == "3.216", "the clipped value is written beside its marker"
    # Every row is drawn exactly once, as what it is.
    assert sets["kept"] == {r[0] for r in kept} and sets["crash / no value"] == set(CRASH_AT)
    assert sets["discarded"] | sets["clipped"] == {r[0] for r in rows if r[2] == "discard"}
    # The staircase is the running minimum of the kept rows, step by step.
    best, running = None, []
    for i, v, status, _ in rows:
        if status == "keep":
            best = v if best is None else min(best, v)
            running.append((i, round(best, 6)))
    line = next(ln for ln in ax.lines if ln.get_label() == "running best")
    xs, ys = line.get_data()
    assert {(round(x), round(y, 6)) for x, y in zip(xs, ys)} >= set(running)
    assert xs[-1] == 126 and ys[-1] == pytest.approx(running[-1][1], abs=1e-6)
    # Whole experiment numbers only.
    ticks = ax.get_xticks()
    assert all(t == int(t) for t in ticks) and all(t.get_text().isdigit() for t in ax.get_xticklabels())
    # Labels: most kept steps have one, no two overlap, all inside the plot.
    labels = texts["label"]
    boxes = [t.get_window_extent(renderer) for t in labels]
    frame = ax.get_window_extent(renderer)
    assert len(labels) >= 15, f"only {len(labels)} of 25 kept steps labelled"
    assert not overlapping(boxes), [(labels[i].get_text(), labels[j].get_text()) for i, j in overlapping(boxes)]
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
    assert "baseline" in [t.get_text() for t in labels]
    hidden = texts.get("hidden-labels", [])
    assert len(labels) + (int(hidden[0].get_text().split()[0]) if hidden else 0) == 25
    # The legend hides no point: it is outside the plot.
    assert not ax.get_legend().get_window_extent(renderer).overlaps(frame)
    # The same chart as the dashboard's: the same points, the same clipping, the same scale.
    lines = read_results(run / "results.tsv").lines
    svg = progress_svg(lines, noise_band(lines, []))
    on_svg = svg_points(svg)
    assert on_svg["keep"] == sets["kept"] and on_svg["discard"] == sets["discarded"]
    assert on_svg["clipped"] == sets["clipped"] and on_svg["crash"] == sets["crash / no value"]
    svg_ticks = [t.rsplit(">", 1)[-1] for t in svg.split("</text>") if 'class="tick"' in t and 'text-anchor="end"' in t]
    assert svg_ticks == [t.get_text() for t in ax.get_yticklabels()]
    corners = re.search(r'class="best" d="([^"]+)"', svg).group(1).split()
    assert len(corners) // 2 == len(xs), "the same staircase, corner for corner"


def test_a_smoke_sized_run(tmp_path):
    """Three rows: the baseline and two discards. Ticks 1, 2, 3; both discards are points on the
    scale (a 0.5% difference is no outlier), and the legend sits off the plot."""
    run = tmp_path / "smoke"
    run.mkdir()
    init_results(run / "results.tsv")
    for c, v, status, desc in (("aaaaaaa", 2.551234, "keep", "baseline"), ("bbbbbbb", 2.563, "discard", "lr 0.08"),
                               ("ccccccc", 2.5591, "discard", "depth 5")):
        append_result(run / "results.tsv", c, v, 0.1, status, desc)
    ax, renderer, texts, sets = drawn(report_progress.figure(run, "smoke"))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3"]
    assert sets["discarded"] == {2, 3} and sets["kept"] == {1} and "clipped" not in sets
    lo, hi = ax.get_ylim()
    assert lo < 2.551234 and 2.563 < hi
    assert not ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    assert [t.get_text() for t in texts["label"]] == ["baseline"]


def test_a_one_row_chart_keeps_its_y_labels_apart_from_the_axis_title(tmp_path):
    run = tmp_path / "one"
    run.mkdir()
    init_results(run / "results.tsv")
    append_result(run / "results.tsv", "aaaaaaa", 3.2686, 1.0, "keep", "baseline")
    ax, renderer, _, _ = drawn(report_progress.figure(run, "one row"))
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    title = ax.yaxis.label.get_window_extent(renderer)
    assert not any(t.get_window_extent(renderer).overlaps(title) for t in ax.get_yticklabels())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1"]


def test_the_report_command_writes_the_chart_of_a_results_tsv_alone(tmp_path):
    """`uv run agent/report.py --run DIR` on a folder holding only a results.tsv (a reference
    run's): progress.png is written, titled with the run's counts."""
    run = tmp_path / "mar8"
    run.mkdir()
    night(run / "results.tsv")
    p = subprocess.run([sys.executable, str(REPO / "agent" / "report.py"), "--run", str(run)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    png = run / "report" / "progress.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "126 experiments, 25 kept" in png_title(png)
