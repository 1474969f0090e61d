"""val_bpb against decode speed for the benchmarked kept commits (inference/bench.py): a small
scatter SVG, lower-right is better (faster and lower loss)."""
from __future__ import annotations

from html import escape

from dashboard.runview import _finite, bench_figures
from harness.results_table import ResultLine

W, H, PAD = 420, 210, 44  # SVG size and the margin for the axis labels


def points(run, rows: list[ResultLine]) -> list[tuple[str, float, float]]:
    """(commit, val_bpb, decode tok/s at batch 1) of each kept row with a benchmark."""
    out = []
    for r in rows:
        if r.status != "keep" or not _finite(r.val_bpb):
            continue
        b = bench_figures(run, r.commit)
        if b:
            out.append((r.commit, r.val_bpb, float(b["decode_tok_s_b1"])))
    return out


def _scale(lo, hi, a, b):
    span = (hi - lo) or abs(lo) or 1.0
    lo, hi = lo - 0.05 * span, hi + 0.05 * span
    return lambda v: a + (v - lo) / (hi - lo) * (b - a)


def scatter_svg(pts: list[tuple[str, float, float]]) -> str:
    if not pts:
        return ""
    xs, ys = [p[2] for p in pts], [p[1] for p in pts]
    X, Y = _scale(min(xs), max(xs), PAD, W - 10), _scale(min(ys), max(ys), H - PAD + 10, 10)
    parts = [f'<svg class="serving" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
             f'aria-label="val_bpb against decode tokens per second">',
             f'<line x1="{PAD}" y1="{H - PAD + 14}" x2="{W - 6}" y2="{H - PAD + 14}" stroke="#d1d5db"/>',
             f'<line x1="{PAD - 4}" y1="6" x2="{PAD - 4}" y2="{H - PAD + 14}" stroke="#d1d5db"/>',
             f'<text x="{W - 6}" y="{H - 6}" text-anchor="end" font-size="11">decode tok/s (batch 1): '
             f'{min(xs):,.0f} – {max(xs):,.0f}</text>',
             f'<text x="4" y="14" font-size="11">val_bpb {min(ys):.4f} – {max(ys):.4f}</text>']
    for commit, bpb, tok_s in pts:
        label = escape(commit[:12])
        parts.append(f'<circle cx="{X(tok_s):.1f}" cy="{Y(bpb):.1f}" r="4" fill="#2563eb"><title>{label}: '
                     f'val_bpb {bpb:.6f}, {tok_s:,.0f} tok/s</title></circle>')
        parts.append(f'<text x="{X(tok_s) + 6:.1f}" y="{Y(bpb) - 5:.1f}" font-size="10">{label[:7]}</text>')
    parts.append("</svg>")
    return "".join(parts)


def flywheel_rows(run) -> list[dict]:
    """The verdict per mix ratio of lab/flywheel.py's flywheel_report.json in the run folder,
    each figure checked (the file is data: a bad one shows nothing rather than breaking the page)."""
    from dashboard import data
    report, _ = data.read_json(run.file("flywheel_report.json"))
    rows = report.get("ratios") if isinstance(report, dict) else None
    out = []
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("verdict"), str):
            continue
        figs = {k: r.get(k) for k in ("ratio", "real_val_loss", "mixed_val_loss", "relative")}
        out.append({"verdict": r["verdict"][:20],
                    **{k: (f"{v:.4f}" if _finite(v) else "—") for k, v in figs.items()}})
    return out
