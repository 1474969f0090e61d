"""The progress chart, drawn server-side as SVG (no JS library, no CDN).

Like the reference's progress.png: x is the experiment number, y is val_bpb (lower is better).
Every experiment is a point: kept ones highlighted and labelled with their description,
discarded ones faded, crashes marked with a cross along the top. The running best is a step
line; the baseline is a dashed line inside its noise band.
"""

from __future__ import annotations

import math
from html import escape

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


def _nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(v: float, step: float) -> str:
    digits = max(0, min(6, -math.floor(math.log10(step)) + 1)) if step > 0 else 4
    return f"{v:.{digits}f}"


def progress_svg(rows: list[dict], band: dict, link=None) -> str:
    """rows: results rows (file order). band: runview.noise_band(). link(n) -> URL or None."""
    pts = [r for r in rows if r["val_bpb"] is not None and r["status"] != "crash" and not r["partial"]]
    crashes = [r for r in rows if (r["status"] == "crash" or r["val_bpb"] is None) and not r["partial"]]
    n_max = max((r["n"] for r in rows), default=1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'class="progress" role="img" aria-label="progress chart">']
    if not pts:
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="empty">'
                   f'no finished experiments with a val_bpb yet</text></svg>')
        return "".join(out)

    base, spread, k = band.get("baseline"), band.get("spread"), band.get("k") or 2.0
    vals = sorted(r["val_bpb"] for r in pts)
    kept = [r for r in pts if r["status"] == "keep"]
    lo = vals[0]
    # The top of the range: enough to show the baseline, its band, and most discarded points;
    # a few wild results must not flatten everything else.
    hi = max(vals[min(len(vals) - 1, int(TOP_QUANTILE * len(vals)))],
             *(r["val_bpb"] for r in kept), base if base is not None else lo)
    if base is not None and spread:
        lo, hi = min(lo, base - k * spread), max(hi, base + k * spread)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.01 or 0.01
    lo, hi = lo - pad, hi + pad
    pw, ph = WIDTH - MARGIN_L - MARGIN_R, HEIGHT - MARGIN_T - MARGIN_B

    def X(n):
        return MARGIN_L + (pw * (n - 1) / max(1, n_max - 1) if n_max > 1 else pw / 2)

    def Y(v):
        return MARGIN_T + ph * (hi - min(max(v, lo), hi)) / (hi - lo)

    # Grid and axes.
    yt = _nice_ticks(lo, hi)
    step = yt[1] - yt[0] if len(yt) > 1 else 0.1
    for t in yt:
        out.append(f'<line class="grid" x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{Y(t):.1f}" y2="{Y(t):.1f}"/>'
                   f'<text class="tick" x="{MARGIN_L - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{_fmt(t, step)}</text>')
    for t in _nice_ticks(1, max(n_max, 2), 10):
        if t == int(t):
            out.append(f'<text class="tick" x="{X(t):.1f}" y="{HEIGHT - MARGIN_B + 16}" '
                       f'text-anchor="middle">{int(t)}</text>')
    out.append(f'<rect class="frame" x="{MARGIN_L}" y="{MARGIN_T}" width="{pw}" height="{ph}" fill="none"/>')
    out.append(f'<text class="axis" x="{MARGIN_L + pw / 2}" y="{HEIGHT - 6}" text-anchor="middle">experiment #</text>')
    out.append(f'<text class="axis" transform="translate(14 {MARGIN_T + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">val_bpb (lower is better)</text>')

    # Baseline and noise band.
    if base is not None:
        if spread:
            y1, y2 = Y(base + k * spread), Y(base - k * spread)
            out.append(f'<rect class="band" x="{MARGIN_L}" y="{y1:.1f}" width="{pw}" height="{max(1, y2 - y1):.1f}" '
                       f'fill="{BAND}" fill-opacity="0.45"><title>noise band: baseline ± {k:g} × {spread:.4g} '
                       f'({escape(band.get("source", ""))})</title></rect>')
        out.append(f'<line class="baseline" x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{Y(base):.1f}" '
                   f'y2="{Y(base):.1f}" stroke="{BASE}" stroke-dasharray="6 4"/>')

    # Running best: a step line through the kept experiments.
    path, best = [], None
    for r in sorted(kept, key=lambda r: r["n"]):
        if best is None or r["val_bpb"] < best:
            x, y = X(r["n"]), Y(r["val_bpb"])
            path.append(f"M{x:.1f} {y:.1f}" if best is None else f"H{x:.1f} V{y:.1f}")
            best = r["val_bpb"]
    if path:
        path.append(f"H{X(n_max):.1f}")
        out.append(f'<path class="best" d="{" ".join(path)}" fill="none" stroke="{BEST}" stroke-width="2"/>')

    def point(r, shape):
        title = escape(f'#{r["n"]} {r["status"]} {r["val_bpb"] if r["val_bpb"] is not None else "-"} '
                       f'{r["description"]}')
        href = link(r["n"]) if link else None
        inner = f'{shape}<title>{title}</title>'
        return f'<a href="{escape(href)}">{inner}</a>' if href else f'<g>{inner}</g>'

    for r in pts:
        if r["status"] != "keep":
            y = Y(r["val_bpb"])
            if r["val_bpb"] > hi:   # clipped: a small triangle at the top edge
                shape = (f'<path class="pt discard" d="M{X(r["n"]):.1f} {MARGIN_T + 1} l-4 7 h8 z" '
                         f'fill="{DISCARD}" fill-opacity="0.6"/>')
            else:
                shape = (f'<circle class="pt discard" cx="{X(r["n"]):.1f}" cy="{y:.1f}" r="3.5" '
                         f'fill="{DISCARD}" fill-opacity="0.45"/>')
            out.append(point(r, shape))
    for r in crashes:
        x, y = X(r["n"]), MARGIN_T - 8
        out.append(point(r, f'<path class="pt crash" d="M{x - 4:.1f} {y - 4} l8 8 m0 -8 l-8 8" '
                            f'stroke="{CRASH}" stroke-width="2"/>'))
    for r in kept:
        out.append(point(r, f'<circle class="pt keep" cx="{X(r["n"]):.1f}" cy="{Y(r["val_bpb"]):.1f}" r="5.5" '
                            f'fill="{KEEP}" stroke="#fff" stroke-width="1.2"/>'))
    for r in kept[-MAX_LABELS:]:
        text = r["description"] if len(r["description"]) <= LABEL_CHARS else r["description"][:LABEL_CHARS - 1] + "…"
        # Near the right edge a label runs up-left instead, so it is not cut off.
        right = X(r["n"]) > WIDTH - MARGIN_R - RIGHT_FLIP
        dx, angle, anchor = (-4, 30, "end") if right else (4, -30, "start")
        out.append(f'<text class="label" text-anchor="{anchor}" transform="translate('
                   f'{X(r["n"]) + dx:.1f} {Y(r["val_bpb"]) - 8:.1f}) rotate({angle})">{escape(text)}</text>')

    # Legend.
    lx = MARGIN_L
    legend = [(f'<circle cx="{lx + 6}" cy="18" r="5" fill="{KEEP}"/>', f"kept ({len(kept)})"),
              (f'<circle cx="{lx + 6}" cy="18" r="4" fill="{DISCARD}" fill-opacity="0.5"/>',
               f"discarded ({len(pts) - len(kept)})"),
              (f'<path d="M{lx + 2} 14 l8 8 m0 -8 l-8 8" stroke="{CRASH}" stroke-width="2"/>', f"crash ({len(crashes)})"),
              (f'<path d="M{lx} 18 h12" stroke="{BEST}" stroke-width="2"/>', "running best")]
    if base is not None:
        swatch = (f'<rect x="{lx}" y="12" width="12" height="12" fill="{BAND}"/>' if spread else "")
        legend.append((swatch + f'<path d="M{lx} 18 h12" stroke="{BASE}" stroke-dasharray="3 2"/>',
                       f"baseline {base:.4f}" + (f" ± {k:g}×{spread:.3g} noise band" if spread
                                                 else " (noise band unknown)")))
    x = 0
    for shape, label in legend:
        out.append(f'<g class="legend" transform="translate({x} 0)">{shape}'
                   f'<text class="tick" x="{lx + 16}" y="22">{escape(label)}</text></g>')
        x += 24 + 8 * len(label)
    out.append("</svg>")
    return "".join(out)
