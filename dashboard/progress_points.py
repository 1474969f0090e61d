"""What the progress chart shows, decided once for both drawings of it: the dashboard's SVG
(dashboard/chart.py) and the report's progress.png (agent/report_progress.py).

- which results.tsv lines are points (every complete line; a crash or a row without a figure is
  a cross, never a point at 0);
- the running best, a staircase through the kept points that restarts after imported rows
  (their figures are another machine's);
- the y range: the kept points (and the noise band, when known) plus a margin. Everything else
  outside it is clipped: drawn at the edge with its value beside it, so one broken run at 3.2
  never squashes a 0.998 -> 0.970 night into a flat line;
- the experiment ticks: whole numbers only;
- the noise band around the judge's baseline (noise_band), from the journal's records.

Stdlib only, so the report can draw without the dashboard's server parts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.experiment_record import ExperimentRecord
from harness.results_table import finite as _finite
from harness.results_table import bpb_figure
from harness.results_table import ResultLine

# Room above and below the kept points' range, as a share of that range (as the reference's
# analysis notebook draws its figure: 15%).
MARGIN = 0.15
# With a single kept figure there is no range to take a share of: the other points within this
# share of it are shown (a smoke run's few discards), anything farther is clipped.
NEAR = 0.1
# The narrowest y range drawn (bpb): one point, or points a hair apart, still get a few distinct
# tick labels at the 6 decimals results.tsv carries.
MIN_SPAN = 1e-4


def plottable(v) -> bool:
    """A value the y scale may use: one that can be a val_bpb (harness/results_table.py bpb_figure: finite,
    not negative, not absurd), so 1e308 or -3.5 is clipped to an edge, never the scale."""
    return bpb_figure(v) is not None


@dataclass(frozen=True)
class Point:
    """One results.tsv line as the chart sees it."""
    n: int
    status: str
    description: str
    value: float | None      # the row's result (inf/nan of a malformed cell too); None: no figure
    imported: bool           # one of the first rows another run's import brought (imported.json)
    line: ResultLine

    @property
    def crossed(self) -> bool:
        """No point to draw: a crash, or a row without a figure (a discard written `nan`)."""
        return self.value is None or self.status == "crash"

    @property
    def kept(self) -> bool:
        return self.status == "keep" and not self.crossed


def _value(r: ResultLine) -> float | None:
    """A row's result as a float, inf/nan of a malformed cell included (rows keep those as
    text), or None for a row without a figure."""
    if r.figure is not None:
        return r.figure
    return float(r.val_text) if r.val_text and r.val_bpb is None else None


def chart_points(rows: list[ResultLine], imported: int = 0) -> list[Point]:
    """Every complete line that stands for an experiment, in file order (a last line still being
    written waits; a line numbered 0 stands for none: dashboard/data.py numbered)."""
    return [Point(r.n, r.status, r.description, _value(r), r.n <= imported, r) for r in rows
            if not r.partial and r.n > 0]


def running_best(points: list[Point]) -> list[tuple[int, float]]:
    """(n, best so far) at each kept point with a plottable figure; the best starts afresh where
    the imported points end."""
    out, best, era = [], None, None
    for p in sorted(points, key=lambda p: p.n):
        if p.imported != era:
            best, era = None, p.imported
        if p.kept and plottable(p.value):
            best = p.value if best is None else min(best, p.value)
            out.append((p.n, best))
    return out


def best_steps(points: list[Point], n_max: int, imported: int = 0) -> list[list[tuple[float, float]]]:
    """The running best as step lines, one per era (imported, then the tag's own): the corners
    (n, value) to join with straight lines, each era's line running on to its last experiment."""
    best = running_best(points)
    out = []
    for era in (True, False):
        seg = [(n, b) for n, b in best if (n <= imported) == era]
        if not seg:
            continue
        corners = [seg[0]]
        for n, b in seg[1:]:
            if b != corners[-1][1]:
                corners += [(n, corners[-1][1]), (n, b)]
        end = max(imported if era else n_max, seg[-1][0])
        if end > corners[-1][0]:
            corners.append((end, corners[-1][1]))
        out.append(corners)
    return out


def label_order(kept: list[Point]) -> list[Point]:
    """Which kept points get a label first when space is short: each era's first (its baseline),
    then the steps that gained most over the best before them, then the rest, newest first."""
    best, firsts, gains = {}, [], []
    for p in sorted(kept, key=lambda p: p.n):
        if p.imported not in best:
            firsts.append(p)
            best[p.imported] = p.value
            continue
        gains.append((best[p.imported] - p.value, p.n, p))
        best[p.imported] = min(best[p.imported], p.value)
    return firsts + [p for _, _, p in sorted(gains, key=lambda g: (-g[0], -g[1]))]


@dataclass(frozen=True)
class YRange:
    lo: float
    hi: float

    def side(self, v: float) -> int:
        """-1 below the range, 0 inside, 1 above (a nan or +inf: above; -inf: below)."""
        if v != v:
            return 1
        return -1 if v < self.lo else 1 if v > self.hi else 0


def y_range(points: list[Point], band: tuple[float, float] | None = None) -> YRange | None:
    """The range drawn: the kept points' figures (and `band`, the noise band's edges, when known)
    plus MARGIN of their span; None when no point has a plottable figure. With a single kept
    figure the points within NEAR of it set the span; with none kept, those near the median."""
    values = [p.value for p in points if not p.crossed and plottable(p.value)]
    if not values:
        return None
    kept = [p.value for p in points if p.kept and plottable(p.value)]
    anchor = kept or [sorted(values)[len(values) // 2]]
    lo, hi = min(anchor), max(anchor)
    if hi - lo <= 0:
        near = [v for v in values if abs(v - lo) <= NEAR * abs(lo)]
        lo, hi = min(near + [lo]), max(near + [hi])
    if band is not None and all(plottable(b) for b in band):
        lo, hi = min(lo, *band), max(hi, *band)
    margin = (hi - lo) * MARGIN
    lo, hi = lo - margin, hi + margin
    if hi - lo < MIN_SPAN:
        mid = (hi + lo) / 2
        lo, hi = mid - MIN_SPAN / 2, mid + MIN_SPAN / 2
    return YRange(lo, hi)


def clipped(points: list[Point], rng: YRange) -> list[Point]:
    """The points with a figure outside the range (or not plottable): drawn at the edge."""
    return [p for p in points if not p.crossed and (not plottable(p.value) or rng.side(p.value) != 0)]


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values in [lo, hi], about `count` of them (steps of 1, 2, 2.5 or 5 x 10^k)."""
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


def tick_text(v: float, step: float) -> str:
    """A tick label with as many decimals as the step needs (at most results.tsv's 6)."""
    digits = max(0, min(6, -math.floor(math.log10(step)) + 1)) if step > 0 and math.isfinite(step) else 4
    return f"{v:.{digits}f}" if abs(v) < 1e9 else f"{v:.3g}"


def value_text(v: float) -> str:
    """A clipped point's value, short: 3.215849 -> "3.22", inf -> "inf"."""
    if not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return f"{v:.3g}" if abs(v) >= 1e4 or abs(v) < 1e-3 else f"{v:.3f}".rstrip("0").rstrip(".")


def x_ticks(n_max: int) -> list[int]:
    """Whole experiment numbers only, never two at one position (one point: just "1")."""
    if n_max <= 1:
        return [1]
    ticks = sorted({int(t) for t in nice_ticks(1, n_max, 10) if t == int(t) and 1 <= t <= n_max})
    step = ticks[1] - ticks[0] if len(ticks) > 1 else n_max
    # The first experiment gets its tick too, unless the first nice tick would crowd it.
    return [1, *ticks] if ticks and ticks[0] > 1 and ticks[0] - 1 >= step / 2 else ticks


def typed(records: list) -> list[ExperimentRecord]:
    """Experiment records, typed: as given, or read from the journal objects a caller holds
    (agent/report.py's dicts); anything else is no record."""
    return [r if isinstance(r, ExperimentRecord) else ExperimentRecord.from_dict(r) for r in records
            if isinstance(r, (ExperimentRecord, dict))]


def noise_band(rows: list[ResultLine], records: list) -> dict:
    """The judge's baseline and the half-width of the band around it that counts as noise.

    The baseline is the kept baseline record's figure (the mean of its runs; a baseline try that
    was not kept is never it). The half-width is the margin the judge used in its latest
    decision that had one (the record's evidence: comparison.margin, the gain a candidate had to
    show); before any, the baseline record's own threshold (k x spread). Without a judge baseline
    (a run judged by the simple reviewer, a lost journal) the baseline is the first row with a
    figure and the band unknown, said so.
    """
    recs = typed(records)
    margin = next(((r, ev) for r in reversed(recs) if r.status in ("keep", "discard")
                   for ev in [r.evidence_view()] if ev is not None and ev.comparison.margin is not None
                   and ev.comparison.margin > 0), None)
    for r in reversed(recs):
        if not r.is_baseline or r.status != "keep":
            continue
        band = r.noise_band()
        values = band.values if band else []
        base = sum(values) / len(values) if values else r.trusted_bpb
        if not _finite(base):
            continue
        threshold = band.threshold if band else None
        source = f"the judge's baseline over {len(values) or 1} run(s)"
        spread = band.spread if band else None
        if margin is not None:
            rec, ev = margin
            t = ev.comparison
            threshold, spread = t.margin, t.sigma
            source += (f"; the margin the judge used at experiment {rec.n}"
                       + (f" (sigma {t.sigma:.4g})" if t.sigma is not None else ""))
        return {"baseline": float(base), "threshold": threshold if threshold and threshold > 0 else None,
                "spread": spread, "k": band.k if band and margin is None else None, "source": source}
    valid = [r for r in rows if r.figure is not None]
    valid = [r for r in valid if r.status == "keep"][:1] or valid
    if not valid:
        return {"baseline": None, "threshold": None, "spread": None, "k": None, "source": "no results yet"}
    return {"baseline": valid[0].figure, "threshold": None, "spread": None, "k": None,
            "source": "first row (no judge baseline recorded)"}
