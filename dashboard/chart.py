"""The progress chart, drawn server-side as SVG (no JS library, no CDN).

Like the reference's progress.png: x is the experiment number, y is val_bpb (lower is better).
Every experiment with a figure is a point: kept ones highlighted and labelled with their
description, discarded ones faded; crashes and rows without a figure (a discard written `nan`, or
0.0 by an older writer) are marked with a cross along the top, never drawn at 0. The running best is a step
line; the baseline is a dashed line inside its noise band. What is a point, the running best, the
y range and what is clipped to its edge are dashboard/progress_points.py's, shared with the
report's progress.png.
"""

from __future__ import annotations

import math
from html import escape

from dashboard.progress_points import (Point, best_steps, chart_points, clipped, label_order, nice_ticks, plottable,
                                       tick_text, value_text, x_ticks, y_range)
from harness.results_table import ResultLine

# Canvas and margins, in SVG user units (the SVG scales to its container's width).
WIDTH, HEIGHT = 1100, 440
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 64, 24, 96, 44
# Colours (match static/style.css's status colours).
KEEP, DISCARD, CRASH, BEST, BASE, BAND = "#1a9850", "#9aa3ad", "#d73027", "#1a9850", "#4b5563", "#fde68a"
# Kept points labelled at most (the biggest steps); thousands of labels would be unreadable.
MAX_LABELS = 60
# Label text is cut to this many characters.
LABEL_CHARS = 42
# Kept points this close to the right edge (SVG units) get their label flipped to the left.
RIGHT_FLIP = 240
# Width of one tick-label character (11px font) and the gap between the longest y tick label and
# the axis title: the left margin grows with the labels, so they never run into the title.
TICK_CHAR_W, TITLE_GAP = 6.6, 24
# A clipped point's value is written beside its edge marker unless the last one written is closer
# than this (SVG units): a run of clipped points keeps one readable value, not a smear.
CLIP_LABEL_GAP = 40
# Room (SVG units) between the frame and the first/last experiment, so no point sits on the edge.
PAD_X = 18
# Label placement: approximate width of one character, sample spacing along a label, the grid
# cell size that decides "too close", and the legend's height (labels stay below it).
LABEL_CHAR_W, LABEL_STEP, LABEL_CELL, LEGEND_H = 5.6, 5, 9, 30
# The chart carries its own fonts and colours, so chart.svg opened alone looks like the page.
FONT = "system-ui, -apple-system, &apos;Segoe UI&apos;, Roboto, &apos;DejaVu Sans&apos;, Arial, sans-serif"
STYLE = ("svg.progress .grid{stroke:#eef0f3} svg.progress .frame{stroke:#d1d5db} "
         "svg.progress .tick{font-size:11px;fill:#6b7280} svg.progress .axis{font-size:12px;fill:#374151} "
         "svg.progress .label{font-size:10px;fill:#14532d} svg.progress .empty{fill:#6b7280;font-size:14px} "
         "svg.progress a:hover circle{stroke:#111827;stroke-width:2}")


def baseline_and_half(band: dict):
    """(baseline, half-width of the noise band) when both are usable numbers."""
    base, half = band["baseline"], band["threshold"]
    base = base if plottable(base) else None
    half = half if plottable(half) and half > 0 else None
    return base, (half if base is not None else None)


def band_edges(band: dict) -> tuple[float, float] | None:
    """The noise band's edges (baseline - half, baseline + half), or None when not known: what
    the y range must include (the report's progress.png takes the same)."""
    base, half = baseline_and_half(band)
    return (base - half, base + half) if half else None


class _Labels:
    """Where kept-point labels go without running into each other, the running best, a point or
    out of `bounds` (x0, y0, x1, y1).

    Each label is approximated by points along its (rotated) baseline; a coarse grid of the
    cells those points touch is what has been taken so far."""

    def __init__(self, bounds: tuple[float, float, float, float]):
        self.taken: set[tuple[int, int]] = set()
        self.bounds = bounds

    def block(self, x0: float, y0: float, x1: float, y1: float) -> None:
        """Take the cells of a straight stretch (a line of the staircase) or a point's spot."""
        steps = max(1, int(math.hypot(x1 - x0, y1 - y0) // LABEL_STEP))
        self.taken.update((int((x0 + (x1 - x0) * k / steps) // LABEL_CELL), int((y0 + (y1 - y0) * k / steps) // LABEL_CELL))
                          for k in range(steps + 1))

    def _free(self, x, y, angle, length):
        """The grid cells a label from (x, y) along `angle` would cover, or None when it would
        leave the bounds or touch what is taken. Its first cell is not checked: it lies beside its
        own point, on the point's own stretch of the running best."""
        dx, dy = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        x0, y0, x1, y1 = self.bounds
        for px, py in ((x, y), (x + dx * length, y + dy * length)):   # a straight line: ends suffice
            if not (x0 <= px <= x1 and y0 <= py <= y1):
                return None
        cells = set()
        for s in range(0, int(length) + 1, LABEL_STEP):
            cell = (int((x + dx * s) // LABEL_CELL), int((y + dy * s) // LABEL_CELL))
            if s >= LABEL_CELL and cell in self.taken:
                return None
            cells.add(cell)
        return cells

    def place(self, x: float, y: float, chars: int, prefer_left: bool):
        """(dx, dy, angle, anchor) for a label at point (x, y), or None when every spot is taken."""
        length = chars * LABEL_CHAR_W
        # Up-right, up-left, down-right, down-left; the side facing the plot's middle first.
        spots = [(4, -30, "start", -8), (-4, 30, "end", -8), (4, 30, "start", 10), (-4, -30, "end", 10)]
        if prefer_left:
            spots = [spots[1], spots[0], spots[3], spots[2]]
        for dx, angle, anchor, dy in spots:
            cells = self._free(x + dx, y + dy, angle + (180 if anchor == "end" else 0), length)
            if cells is None:
                continue
            # What is taken includes a one-cell margin around each placed label.
            self.taken.update((cx + i, cy + j) for cx, cy in cells for i in (-1, 0, 1) for j in (-1, 0, 1))
            return dx, dy, angle, anchor
        return None


def progress_svg(rows: list[ResultLine], band: dict, link=None, imported: int = 0) -> str:
    """rows: results.tsv lines (file order; harness/results_table.py). band: runview.noise_band().
    link(n) -> URL or None. imported: how many first rows an import brought (imported.json)."""
    every = chart_points(rows, imported)
    pts = [p for p in every if not p.crossed]
    crashes = [p for p in every if p.crossed]
    n_max = max((r.n for r in rows), default=1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'class="progress" role="img" aria-label="progress chart" font-family="{FONT}" font-size="11">'
           f'<style>{STYLE}</style>']
    base, half = baseline_and_half(band)
    rng = y_range(every, band_edges(band))
    if rng is None:
        why = (f"no finite val_bpb to plot yet ({len(pts)} result(s) not finite or off the scale)" if pts
               else "no finished experiments with a val_bpb yet")
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="empty">{why}</text></svg>')
        return "".join(out)
    lo, hi = rng.lo, rng.hi
    yt = nice_ticks(lo, hi)
    step = yt[1] - yt[0] if len(yt) > 1 else 0.1
    tick_labels = [tick_text(t, step) for t in yt]
    # The left margin holds the longest y tick label and, apart from it, the axis title.
    margin_l = max(MARGIN_L, int(max(map(len, tick_labels), default=0) * TICK_CHAR_W) + 6 + TITLE_GAP)
    pw, ph = WIDTH - margin_l - MARGIN_R, HEIGHT - MARGIN_T - MARGIN_B
    inner = pw - 2 * PAD_X

    def X(n):
        return margin_l + PAD_X + (inner * (n - 1) / (n_max - 1) if n_max > 1 else inner / 2)

    def Y(v):
        v = v if math.isfinite(v) else (hi if v > 0 else lo)
        return MARGIN_T + ph * (hi - min(max(v, lo), hi)) / (hi - lo)

    # Grid and axes.
    for t, text in zip(yt, tick_labels):
        out.append(f'<line class="grid" x1="{margin_l}" x2="{WIDTH - MARGIN_R}" y1="{Y(t):.1f}" y2="{Y(t):.1f}"/>'
                   f'<text class="tick" x="{margin_l - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{text}</text>')
    for t in x_ticks(n_max):
        out.append(f'<text class="tick" x="{X(t):.1f}" y="{HEIGHT - MARGIN_B + 16}" '
                   f'text-anchor="middle">{t}</text>')
    if imported:
        x1, x2 = max(margin_l, X(0.5)), min(WIDTH - MARGIN_R, X(imported + 0.5))
        out.append(f'<rect class="imported" x="{x1:.1f}" y="{MARGIN_T}" width="{max(0.0, x2 - x1):.1f}" '
                   f'height="{ph}" fill="#e5e7eb" fill-opacity="0.6"><title>experiments 1-{imported} are '
                   "imported: another machine's figures</title></rect>")
    out.append(f'<rect class="frame" x="{margin_l}" y="{MARGIN_T}" width="{pw}" height="{ph}" fill="none"/>')
    out.append(f'<text class="axis" x="{margin_l + pw / 2}" y="{HEIGHT - 6}" text-anchor="middle">experiment #</text>')
    title_x = margin_l - 6 - max(map(len, tick_labels), default=0) * TICK_CHAR_W - TITLE_GAP / 2
    out.append(f'<text class="axis" transform="translate({max(12.0, title_x):.1f} {MARGIN_T + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">val_bpb (lower is better)</text>')

    # Baseline and noise band.
    if base is not None:
        if half:
            y1, y2 = Y(base + half), Y(base - half)
            out.append(f'<rect class="band" x="{margin_l}" y="{y1:.1f}" width="{pw}" height="{max(1, y2 - y1):.1f}" '
                       f'fill="{BAND}" fill-opacity="0.45"><title>noise band: baseline ± {half:.4g} '
                       f'({escape(str(band["source"]))})</title></rect>')
        if lo <= base <= hi:
            out.append(f'<line class="baseline" x1="{margin_l}" x2="{WIDTH - MARGIN_R}" y1="{Y(base):.1f}" '
                       f'y2="{Y(base):.1f}" stroke="{BASE}" stroke-dasharray="6 4"/>')

    # Running best: a step line through the kept experiments (one per era: imported, own).
    # Labels stay inside the frame's width, above its bottom, and off what is drawn below.
    labels = _Labels((margin_l, LEGEND_H, WIDTH - MARGIN_R, MARGIN_T + ph))
    for corners in best_steps(every, n_max, imported):
        d = " ".join(("M" if k == 0 else "L") + f"{X(n):.1f} {Y(v):.1f}" for k, (n, v) in enumerate(corners))
        out.append(f'<path class="best" d="{d}" fill="none" stroke="{BEST}" stroke-width="2"/>')
        for (n0, v0), (n1, v1) in zip(corners, corners[1:]):
            labels.block(X(n0), Y(v0), X(n1), Y(v1))

    def point(p: Point, shape):
        r = p.line
        shown = r.val_text or (r.val_bpb if r.val_bpb is not None else "-")
        title = escape(f'#{r.n} {r.status or "?"} {shown} {r.description}')
        href = link(r.n) if link else None
        inner = f'{shape}<title>{title}</title>'
        return f'<a href="{escape(href)}">{inner}</a>' if href else f'<g>{inner}</g>'

    out_of_range = {p.n for p in clipped(every, rng)}
    last_value_x = [-1e9, -1e9]          # the last clipped value written, at the top and at the bottom

    def off_scale(p: Point, cls, fill):
        # Outside the plotted range (or not finite): a small triangle at the edge it lies beyond,
        # pointing out, with the clipped value beside it.
        x, top = X(p.n), rng.side(p.value) >= 0
        y = MARGIN_T + 1 if top else MARGIN_T + ph - 1
        shape = (f'<path class="pt {cls} clipped" d="M{x:.1f} {y} l-4 {7 if top else -7} h8 z" fill="{fill}" '
                 f'fill-opacity="0.8"/>')
        k = 0 if top else 1
        labels.block(x - 4, y, x + 4, y)
        if x - last_value_x[k] >= CLIP_LABEL_GAP:
            last_value_x[k] = x
            text_y = y + (10 if top else -3)
            labels.block(x + 6, text_y - 4, x + 6 + len(value_text(p.value)) * TICK_CHAR_W, text_y - 4)
            shape += (f'<text class="tick clipped-value" x="{x + 6:.1f}" y="{text_y}">'
                      f'{escape(value_text(p.value))}</text>')
        return shape

    kept = [p for p in pts if p.status == "keep"]
    for p in pts:
        if p.status != "keep":
            if p.n in out_of_range:
                shape = off_scale(p, "discard", DISCARD)
            else:
                shape = (f'<circle class="pt discard" cx="{X(p.n):.1f}" cy="{Y(p.value):.1f}" r="3.5" '
                         f'fill="{DISCARD}" fill-opacity="0.45"/>')
            out.append(point(p, shape))
    for p in crashes:
        x, y = X(p.n), MARGIN_T - 8
        labels.block(x - 4, y, x + 4, y)
        out.append(point(p, f'<path class="pt crash" d="M{x - 4:.1f} {y - 4} l8 8 m0 -8 l-8 8" '
                            f'stroke="{CRASH}" stroke-width="2"/>'))
    for p in kept:
        if p.n in out_of_range:
            out.append(point(p, off_scale(p, "keep", KEEP)))
            continue
        out.append(point(p, f'<circle class="pt keep" cx="{X(p.n):.1f}" cy="{Y(p.value):.1f}" r="5.5" '
                            f'fill="{KEEP}" stroke="#fff" stroke-width="1.2"/>'))
        labels.block(X(p.n) - 5, Y(p.value), X(p.n) + 5, Y(p.value))
    hidden = 0
    # The baseline and the biggest steps first (as progress.png): when space runs out, the small ones give way.
    for p in label_order([p for p in kept if p.n not in out_of_range])[:MAX_LABELS]:
        text = p.description if len(p.description) <= LABEL_CHARS else p.description[:LABEL_CHARS - 1] + "…"
        x, y = X(p.n), Y(p.value)
        spot = labels.place(x, y, len(text), prefer_left=x > WIDTH - MARGIN_R - RIGHT_FLIP)
        if spot is None:
            hidden += 1
            continue
        dx, dy, angle, anchor = spot
        out.append(f'<text class="label" text-anchor="{anchor}" transform="translate('
                   f'{x + dx:.1f} {y + dy:.1f}) rotate({angle})">{escape(text)}</text>')
    if hidden:
        out.append(f'<text class="tick hidden-labels" x="{WIDTH - MARGIN_R}" y="{HEIGHT - 6}" text-anchor="end">'
                   f'{hidden} label(s) hidden to avoid overlap (hover a point)</text>')

    # Legend.
    lx = margin_l
    legend = [(f'<circle cx="{lx + 6}" cy="18" r="5" fill="{KEEP}"/>', f"kept ({len(kept)})"),
              (f'<circle cx="{lx + 6}" cy="18" r="4" fill="{DISCARD}" fill-opacity="0.5"/>',
               f"discarded ({len(pts) - len(kept)})"),
              (f'<path d="M{lx + 2} 14 l8 8 m0 -8 l-8 8" stroke="{CRASH}" stroke-width="2"/>', f"crash / no value ({len(crashes)})"),
              (f'<path d="M{lx} 18 h12" stroke="{BEST}" stroke-width="2"/>', "running best")]
    if out_of_range:
        legend.append((f'<path d="M{lx + 6} 12 l-5 9 h10 z" fill="{DISCARD}"/>',
                       f"clipped ({len(out_of_range)})"))
    if base is not None:
        swatch = (f'<rect x="{lx}" y="12" width="12" height="12" fill="{BAND}"/>' if half else "")
        legend.append((swatch + f'<path d="M{lx} 18 h12" stroke="{BASE}" stroke-dasharray="3 2"/>',
                       f"baseline {base:.4f}" + (f" ± {half:.3g} noise band" if half else " (noise band unknown)")))
    x = 0
    for shape, label in legend:
        out.append(f'<g class="legend" transform="translate({x} 0)">{shape}'
                   f'<text class="tick" x="{lx + 16}" y="22">{escape(label)}</text></g>')
        x += 24 + 8 * len(label)
    out.append("</svg>")
    return "".join(out)
