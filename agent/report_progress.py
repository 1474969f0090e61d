"""progress.png: the reference's chart of a run, to share: every experiment's val_bpb by number,
the discarded ones as faint points, the kept ones green, the running best as a staircase through
them, each kept step labelled with its description.

Written beside report.html by agent/report.py (through agent/report_share.py). It draws what the
dashboard's chart draws (dashboard/progress_points.py decides for both): the same points, the
same running best, the same y range from the kept points with a margin. A point outside it (one
broken run at 3.2 among 0.97s) is clipped: a triangle at the edge with its value beside it.
Crashes have no figure and are crosses above the frame. Imported experiments (agent/import_run.py)
are shaded: their figures are another machine's, so the running best starts afresh after them.
Labels never overlap: each is tried at a few places around its point, then shortened, then left
out (the figure says how many).
"""
from __future__ import annotations

from pathlib import Path

from dashboard.progress_points import (Point, best_steps, chart_points, clipped, label_order, nice_ticks,  # noqa: F401
                                       running_best, tick_text, value_text, x_ticks, y_range)
from dashboard.data import read_results   # numbered as the dashboard numbers them (the journal beside it)

# Figure size in inches and its resolution: 1800 x 900 pixels, readable in a chat or a README.
SIZE_IN = (12, 6)
DPI = 150
# Characters of a kept change's description written beside its point; a label that finds no free
# place at full length is tried again at SHORT_CHARS.
LABEL_CHARS = 40
SHORT_CHARS = 22
# Where a label may go around its point, in order of preference: (dx, dy) in points and its
# alignment. Up-right first (as the reference draws), then below-left (under the staircase,
# where no discard lies), then the other two corners.
LABEL_SPOTS = ((5, 4, "left", "bottom"), (-5, -4, "right", "top"), (5, -4, "left", "top"),
               (-5, 4, "right", "bottom"))
# Font sizes (points): kept-step labels, clipped values, the rest.
LABEL_PT, VALUE_PT, TEXT_PT = 7, 6.5, 9
# Colours, as the dashboard's chart (dashboard/chart.py) draws them.
KEEP, DISCARD, CRASH, BEST, BASE, BAND, SHADE = ("#1a9850", "#9aa3ad", "#d73027", "#1a9850", "#4b5563",
                                                 "#fde68a", "#e5e7eb")
# Room left and right of the first and last experiment, as a share of the experiments' span.
PAD_X = 0.015
# Half-size (pixels) of a kept point's marker as an obstacle no label may cover.
MARKER_PX = 5


def points(run_dir: Path, imported: int = 0) -> list[Point]:
    """One point per results.tsv line that is an experiment (dashboard/progress_points.py Point),
    numbered as the dashboard's chart numbers them."""
    return chart_points(read_results(Path(run_dir) / "results.tsv").lines, imported)


def _band(run_dir: Path, records) -> tuple[float | None, float | None]:
    """(baseline, half-width of the noise band), as the dashboard's chart takes them."""
    from dashboard.chart import baseline_and_half
    from dashboard.progress_points import noise_band
    return baseline_and_half(noise_band(read_results(Path(run_dir) / "results.tsv").lines, list(records)))


def figure(run_dir: Path, title: str, imported: int = 0, records=()):
    """The drawn figure (matplotlib), or None when there is nothing to draw (no measured row).
    Its texts carry a gid: "label" (kept steps), "clipped-value" and "hidden-labels"."""
    every = points(run_dir, imported)
    base, half = _band(run_dir, records)
    rng = y_range(every, (base - half, base + half) if half else None)
    if rng is None:
        return None
    import matplotlib
    matplotlib.use("Agg")   # no display: a file only
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=SIZE_IN, dpi=DPI)
    try:
        _draw(fig, ax, every, rng, base, half, imported, title)
    except BaseException:
        plt.close(fig)             # pyplot keeps every open figure: a failed one is not left behind
        raise
    return fig


def _draw(fig, ax, every: list[Point], rng, base, half, imported: int, title: str) -> None:
    n_max = max(p.n for p in every)
    out = {p.n for p in clipped(every, rng)}
    inside = [p for p in every if not p.crossed and p.n not in out]
    kept = [p for p in inside if p.status == "keep"]
    disc = [p for p in inside if p.status != "keep"]
    pad = max(0.5, PAD_X * (n_max - 1))
    ax.set_xlim(1 - pad, n_max + pad)
    ax.set_ylim(rng.lo, rng.hi)
    if imported:
        ax.axvspan(0.5, imported + 0.5, color=SHADE, alpha=0.6, lw=0, label=f"imported (1-{imported}: another machine's figures)")
    if base is not None:
        if half:
            ax.axhspan(base - half, base + half, color=BAND, alpha=0.45, lw=0, label=f"noise band ± {half:.3g}")
        if rng.lo <= base <= rng.hi:
            ax.axhline(base, color=BASE, lw=1, ls=(0, (6, 4)), zorder=1.5, label=f"baseline {base:.4f}")
    ax.scatter([p.n for p in disc], [p.value for p in disc], s=18, color=DISCARD, alpha=0.6, lw=0, zorder=2,
               label=f"discarded ({sum(not p.crossed and p.status != 'keep' for p in every)})")
    for k, corners in enumerate(best_steps(every, n_max, imported)):
        ax.plot([n for n, _ in corners], [v for _, v in corners], color=BEST, lw=2, alpha=0.75, zorder=3,
                label=None if k else "running best")
    ax.scatter([p.n for p in kept], [p.value for p in kept], s=42, color=KEEP, edgecolors="black", linewidths=0.5,
               zorder=4, label=f"kept ({sum(p.kept for p in every)})")
    edge = [p for p in every if p.n in out]
    labelled = False
    for top in (True, False):
        side = [p for p in edge if (rng.side(p.value) >= 0) == top]
        if side:
            ax.scatter([p.n for p in side], [rng.hi if top else rng.lo] * len(side), marker="^" if top else "v",
                       s=36, color=[KEEP if p.status == "keep" else DISCARD for p in side], zorder=5, clip_on=False,
                       label=None if labelled else f"clipped ({len(edge)}): at the edge, value beside")
            labelled = True
    crashes = [p.n for p in every if p.crossed]
    if crashes:
        ax.scatter(crashes, [1.025] * len(crashes), marker="x", s=20, color=CRASH, zorder=5, clip_on=False,
                   transform=ax.get_xaxis_transform(), label=f"crash / no value ({len(crashes)})")
    ax.set_xticks(x_ticks(n_max))
    yt = [t for t in nice_ticks(rng.lo, rng.hi) if rng.lo <= t <= rng.hi]
    step = yt[1] - yt[0] if len(yt) > 1 else 0.1
    ax.set_yticks(yt, [tick_text(t, step) for t in yt])
    ax.set_xlabel("experiment #", fontsize=TEXT_PT + 1)
    ax.set_ylabel("val_bpb (lower is better)", fontsize=TEXT_PT + 1)
    ax.set_title(title, fontsize=TEXT_PT + 2, pad=14)
    ax.tick_params(labelsize=TEXT_PT)
    ax.grid(alpha=0.25)
    # Below the axes, so the legend hides no point.
    ax.legend(fontsize=TEXT_PT - 1, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, frameon=False)
    fig.tight_layout()
    _place_texts(fig, ax, kept, edge, rng, best_steps(every, n_max, imported))


def _place_texts(fig, ax, kept: list[Point], edge: list[Point], rng, steps) -> None:
    """The clipped values and the kept steps' labels, each where it overlaps no other, no kept
    point and no stretch of the running best, inside the axes; placed once the layout is final
    (a later layout would move them)."""
    from matplotlib.transforms import Bbox
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = []
    for p in kept:
        x, y = ax.transData.transform((p.n, p.value))
        taken.append(Bbox.from_extents(x - MARKER_PX, y - MARKER_PX, x + MARKER_PX, y + MARKER_PX))
    for corners in steps:                # each straight stretch of the staircase, a line 2 px wide
        for a, b in zip(corners, corners[1:]):
            (x0, y0), (x1, y1) = ax.transData.transform(a), ax.transData.transform(b)
            taken.append(Bbox.from_extents(min(x0, x1) - 1, min(y0, y1) - 1, max(x0, x1) + 1, max(y0, y1) + 1))

    def put(text, xy, spots, size, color, gid, within=frame) -> bool:
        for dx, dy, ha, va in spots:
            t = ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=size,
                            color=color, gid=gid, annotation_clip=False, zorder=6)
            box = t.get_window_extent(renderer)
            if (within is None or (box.x0 >= within.x0 and box.x1 <= within.x1 and box.y0 >= within.y0
                                   and box.y1 <= within.y1)) and not any(box.overlaps(b) for b in taken):
                taken.append(box)
                return True
            t.remove()
        return False

    for p in edge:                       # the clipped values: beside the edge marker, inside the frame
        top = rng.side(p.value) >= 0
        put(value_text(p.value), (p.n, rng.hi if top else rng.lo), [(5, -3 if top else 3, "left", "top" if top else "bottom")],
            VALUE_PT, "#4b5563", "clipped-value")
    hidden = 0
    for p in label_order(kept):
        text = " ".join(p.description.split()) or "(no description)"   # a tab or newline in it is a space
        tries = [text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"]
        if len(text) > SHORT_CHARS:
            tries.append(text[:SHORT_CHARS - 1] + "…")
        if not any(put(t, (p.n, p.value), LABEL_SPOTS, LABEL_PT, "#14532d", "label") for t in tries):
            hidden += 1
    if hidden:
        ax.annotate(f"{hidden} label(s) left out to avoid overlap", (1, 0), xycoords="axes fraction",
                    xytext=(-4, 4), textcoords="offset points", ha="right", va="bottom", fontsize=VALUE_PT,
                    color="#6b7280", gid="hidden-labels")


def write_png(run_dir: Path, path: Path, title: str, imported: int = 0, records=()) -> Path | None:
    """Draw the run into `path`; None when there is nothing to draw (no measured row)."""
    fig = figure(run_dir, title, imported, records)
    if fig is None:
        return None
    import matplotlib.pyplot as plt
    try:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, metadata={"Title": title})   # the title as text too: a reader (or test) needs no OCR
    finally:
        plt.close(fig)
    return path
