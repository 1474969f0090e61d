"""The progress chart, drawn server-side as SVG (no JS library, no CDN).

Like the reference's progress.png: x is the experiment number, y is val_bpb (lower is better).
Every experiment with a figure is a point: kept ones highlighted and labelled with their
description, discarded ones faded; crashes and rows without a figure (a discard written `nan`, or
0.0 by an older writer) are marked with a cross along the top, never drawn at 0. The running best is a step
line; the baseline is a dashed line inside its noise band.
"""

from __future__ import annotations

import math
from html import escape

from harness.results_table import ResultLine

# Canvas and margins, in SVG user units (the SVG scales to its container's width).
WIDTH, HEIGHT = 1100, 440
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 64, 24, 96, 44
# Colours (match static/style.css's status colours).
KEEP, DISCARD, CRASH, BEST, BASE, BAND = "#1a9850", "#9aa3ad", "#d73027", "#1a9850", "#4b5563", "#fde68a"
# Kept points labelled at most (the latest ones); thousands of labels would be unreadable.
MAX_LABELS = 60
# Label text is cut to this many characters.
LABEL_CHARS = 42
# Kept points this close to the right edge (SVG units) get their label flipped to the left.
RIGHT_FLIP = 240
# Points above the plotted range are drawn clipped at the top (as triangles).
TOP_QUANTILE = 0.9
# |val_bpb| beyond this is garbage (bits per byte are single digits): drawn off-scale, never
# allowed to stretch the axis (1e308 - -1e308 overflows to inf).
MAX_ABS = 1e6
# The narrowest y range drawn (bpb): a single point, or points a hair apart, still get a few
# distinct tick labels at the 6 decimals results.tsv carries.
MIN_SPAN = 1e-4
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


def _nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / count
    if not math.isfinite(raw) or raw <= 0:
        return [lo, hi]
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9 and len(ticks) <= 4 * count:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(v: float, step: float) -> str:
    digits = max(0, min(6, -math.floor(math.log10(step)) + 1)) if step > 0 and math.isfinite(step) else 4
    return f"{v:.{digits}f}" if abs(v) < 1e9 else f"{v:.3g}"


def plottable(v) -> bool:
    """A value the y scale may use: finite and not absurd (val_bpb is a few bits per byte)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= MAX_ABS


def _value(r: ResultLine):
    """A row's result as a float, inf/nan of a malformed cell included (rows keep those as text),
    or None: a row without a figure (a crash, a discard marked `nan` or 0.0) is no point."""
    if r.figure is not None:
        return r.figure
    return float(r.val_text) if r.val_text and r.val_bpb is None else None


def _band(band: dict):
    """(baseline, half-width of the noise band) when both are usable numbers."""
    base, half = band["baseline"], band["threshold"]
    base = base if plottable(base) else None
    half = half if plottable(half) and half > 0 else None
    return base, (half if base is not None else None)


def _x_ticks(n_max: int) -> list[int]:
    """Whole experiment numbers only, never two at one position (one point: just "1")."""
    if n_max <= 1:
        return [1]
    ticks = sorted({int(t) for t in _nice_ticks(1, n_max, 10) if t == int(t) and 1 <= t <= n_max})
    step = ticks[1] - ticks[0] if len(ticks) > 1 else n_max
    # The first experiment gets its tick too, unless the first nice tick would crowd it.
    return [1, *ticks] if ticks and ticks[0] > 1 and ticks[0] - 1 >= step / 2 else ticks


class _Labels:
    """Where kept-point labels go without running into each other or off the canvas.

    Each label is approximated by points along its (rotated) baseline; a coarse grid of the
    cells those points touch is what has been taken so far."""

    def __init__(self):
        self.taken: set[tuple[int, int]] = set()

    def _free(self, x, y, angle, length):
        """The grid cells a label from (x, y) along `angle` would cover, or None when it would
        leave the canvas or touch a label already placed."""
        dx, dy = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        for px, py in ((x, y), (x + dx * length, y + dy * length)):   # a straight line: ends suffice
            if not (0 <= px <= WIDTH and LEGEND_H <= py <= HEIGHT):
                return None
        cells = set()
        for s in range(0, int(length) + 1, LABEL_STEP):
            cell = (int((x + dx * s) // LABEL_CELL), int((y + dy * s) // LABEL_CELL))
            if cell in self.taken:
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


def progress_svg(rows: list[ResultLine], band: dict, link=None) -> str:
    """rows: results.tsv lines (file order; harness/results_table.py). band: runview.noise_band().
    link(n) -> URL or None."""
    pts = [r for r in rows if _value(r) is not None and r.status != "crash" and not r.partial]
    crashes = [r for r in rows if (r.status == "crash" or _value(r) is None) and not r.partial]
    n_max = max((r.n for r in rows), default=1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'class="progress" role="img" aria-label="progress chart" font-family="{FONT}" font-size="11">'
           f'<style>{STYLE}</style>']
    scaled = [r for r in pts if plottable(r.val_bpb)]
    if not scaled:
        why = (f"no finite val_bpb to plot yet ({len(pts)} result(s) not finite or off the scale)" if pts
               else "no finished experiments with a val_bpb yet")
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="empty">{why}</text></svg>')
        return "".join(out)

    base, half = _band(band)
    vals = sorted(r.val_bpb for r in scaled)
    kept = [r for r in pts if r.status == "keep"]
    lo = vals[0]
    # The top of the range: enough to show the baseline, its band, and most discarded points;
    # a few wild results must not flatten everything else.
    hi = max(vals[min(len(vals) - 1, int(TOP_QUANTILE * len(vals)))],
             *(r.val_bpb for r in kept if plottable(r.val_bpb)), base if base is not None else lo)
    if base is not None and half:
        lo, hi = min(lo, base - half), max(hi, base + half)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.01 or 0.01
    lo, hi = lo - pad, hi + pad
    if hi - lo < MIN_SPAN:
        mid = (hi + lo) / 2
        lo, hi = mid - MIN_SPAN / 2, mid + MIN_SPAN / 2
    pw, ph = WIDTH - MARGIN_L - MARGIN_R, HEIGHT - MARGIN_T - MARGIN_B
    inner = pw - 2 * PAD_X

    def X(n):
        return MARGIN_L + PAD_X + (inner * (n - 1) / (n_max - 1) if n_max > 1 else inner / 2)

    def Y(v):
        v = v if math.isfinite(v) else (hi if v > 0 else lo)
        return MARGIN_T + ph * (hi - min(max(v, lo), hi)) / (hi - lo)

    # Grid and axes.
    yt = _nice_ticks(lo, hi)
    step = yt[1] - yt[0] if len(yt) > 1 else 0.1
    for t in yt:
        out.append(f'<line class="grid" x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{Y(t):.1f}" y2="{Y(t):.1f}"/>'
                   f'<text class="tick" x="{MARGIN_L - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{_fmt(t, step)}</text>')
    for t in _x_ticks(n_max):
        out.append(f'<text class="tick" x="{X(t):.1f}" y="{HEIGHT - MARGIN_B + 16}" '
                   f'text-anchor="middle">{t}</text>')
    out.append(f'<rect class="frame" x="{MARGIN_L}" y="{MARGIN_T}" width="{pw}" height="{ph}" fill="none"/>')
    out.append(f'<text class="axis" x="{MARGIN_L + pw / 2}" y="{HEIGHT - 6}" text-anchor="middle">experiment #</text>')
    out.append(f'<text class="axis" transform="translate(14 {MARGIN_T + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">val_bpb (lower is better)</text>')

    # Baseline and noise band.
    if base is not None:
        if half:
            y1, y2 = Y(base + half), Y(base - half)
            out.append(f'<rect class="band" x="{MARGIN_L}" y="{y1:.1f}" width="{pw}" height="{max(1, y2 - y1):.1f}" '
                       f'fill="{BAND}" fill-opacity="0.45"><title>noise band: baseline ± {half:.4g} '
                       f'({escape(str(band["source"]))})</title></rect>')
        out.append(f'<line class="baseline" x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{Y(base):.1f}" '
                   f'y2="{Y(base):.1f}" stroke="{BASE}" stroke-dasharray="6 4"/>')

    # Running best: a step line through the kept experiments.
    path, best = [], None
    for r in sorted(kept, key=lambda r: r.n):
        if plottable(r.val_bpb) and (best is None or r.val_bpb < best):
            x, y = X(r.n), Y(r.val_bpb)
            path.append(f"M{x:.1f} {y:.1f}" if best is None else f"H{x:.1f} V{y:.1f}")
            best = r.val_bpb
    if path:
        path.append(f"H{X(n_max):.1f}")
        out.append(f'<path class="best" d="{" ".join(path)}" fill="none" stroke="{BEST}" stroke-width="2"/>')

    def point(r, shape):
        shown = r.val_text or (r.val_bpb if r.val_bpb is not None else "-")
        title = escape(f'#{r.n} {r.status or "?"} {shown} {r.description}')
        href = link(r.n) if link else None
        inner = f'{shape}<title>{title}</title>'
        return f'<a href="{escape(href)}">{inner}</a>' if href else f'<g>{inner}</g>'

    def off_scale(r, cls, fill):
        # Above the plotted range (or not finite): a small triangle at the top edge;
        # below it (absurdly low): one at the bottom edge, pointing down.
        x, v = X(r.n), _value(r)
        if v != v or v > hi:
            return f'<path class="pt {cls}" d="M{x:.1f} {MARGIN_T + 1} l-4 7 h8 z" fill="{fill}" fill-opacity="0.7"/>'
        return f'<path class="pt {cls}" d="M{x:.1f} {MARGIN_T + ph - 1} l-4 -7 h8 z" fill="{fill}" fill-opacity="0.7"/>'

    for r in pts:
        if r.status != "keep":
            if not (lo <= _value(r) <= hi):
                shape = off_scale(r, "discard", DISCARD)
            else:
                shape = (f'<circle class="pt discard" cx="{X(r.n):.1f}" cy="{Y(r.val_bpb):.1f}" r="3.5" '
                         f'fill="{DISCARD}" fill-opacity="0.45"/>')
            out.append(point(r, shape))
    for r in crashes:
        x, y = X(r.n), MARGIN_T - 8
        out.append(point(r, f'<path class="pt crash" d="M{x - 4:.1f} {y - 4} l8 8 m0 -8 l-8 8" '
                            f'stroke="{CRASH}" stroke-width="2"/>'))
    for r in kept:
        if not (lo <= _value(r) <= hi):
            out.append(point(r, off_scale(r, "keep", KEEP)))
            continue
        out.append(point(r, f'<circle class="pt keep" cx="{X(r.n):.1f}" cy="{Y(r.val_bpb):.1f}" r="5.5" '
                            f'fill="{KEEP}" stroke="#fff" stroke-width="1.2"/>'))
    labels, hidden = _Labels(), 0
    # The newest labels first: when space runs out, the older ones give way.
    for r in reversed([r for r in kept if lo <= _value(r) <= hi][-MAX_LABELS:]):
        text = r.description if len(r.description) <= LABEL_CHARS else r.description[:LABEL_CHARS - 1] + "…"
        x, y = X(r.n), Y(r.val_bpb)
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
    lx = MARGIN_L
    legend = [(f'<circle cx="{lx + 6}" cy="18" r="5" fill="{KEEP}"/>', f"kept ({len(kept)})"),
              (f'<circle cx="{lx + 6}" cy="18" r="4" fill="{DISCARD}" fill-opacity="0.5"/>',
               f"discarded ({len(pts) - len(kept)})"),
              (f'<path d="M{lx + 2} 14 l8 8 m0 -8 l-8 8" stroke="{CRASH}" stroke-width="2"/>', f"crash / no value ({len(crashes)})"),
              (f'<path d="M{lx} 18 h12" stroke="{BEST}" stroke-width="2"/>', "running best")]
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
