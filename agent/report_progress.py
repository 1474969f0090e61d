"""progress.png: the reference's chart of a run, to share: every experiment's val_bpb by number,
the discarded ones as grey points, the kept ones as green steps, and the running best.

Written beside report.html by agent/report.py (through agent/report_share.py). Crashes have no
figure and are drawn as marks on the bottom edge. Imported experiments (agent/import_run.py) are
shaded: their figures are another machine's, so the running best starts afresh after them.
"""
from __future__ import annotations

from pathlib import Path

from harness.results import read_results

# Figure size in inches and its resolution: 1600 x 800 pixels, readable in a chat or a README.
SIZE_IN = (10, 5)
DPI = 160
# Characters of a kept change's description written beside its point.
LABEL_CHARS = 28


def points(run_dir: Path, imported: int = 0) -> list[dict]:
    """One point per results.tsv row: {"n", "bpb" (None for a crash), "status", "description", "imported"}."""
    out = []
    for ln in read_results(Path(run_dir) / "results.tsv").rows:
        bpb = ln.val_bpb if ln.status != "crash" and ln.val_bpb else None
        out.append({"n": ln.n, "bpb": bpb, "status": ln.status, "description": ln.description,
                    "imported": ln.n <= imported})
    return out


def running_best(pts: list[dict]) -> list[tuple[int, float]]:
    """(n, best so far) at each kept point; restarts where the imported points end."""
    out, best, era = [], None, None
    for p in pts:
        if p["imported"] != era:
            best, era = None, p["imported"]
        if p["status"] == "keep" and p["bpb"] is not None:
            best = p["bpb"] if best is None else min(best, p["bpb"])
            out.append((p["n"], best))
    return out


def write_png(run_dir: Path, path: Path, title: str, imported: int = 0) -> Path | None:
    """Draw the run into `path`; None when there is nothing to draw (no measured row)."""
    pts = points(run_dir, imported)
    measured = [p for p in pts if p["bpb"] is not None]
    if not measured:
        return None
    import matplotlib
    matplotlib.use("Agg")   # no display: a file only
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=SIZE_IN, dpi=DPI)
    try:
        if imported:
            ax.axvspan(0.5, imported + 0.5, color="#e5e7eb", alpha=0.6, label="imported (another machine's figures)")
        disc = [p for p in measured if p["status"] != "keep"]
        kept = [p for p in measured if p["status"] == "keep"]
        ax.scatter([p["n"] for p in disc], [p["bpb"] for p in disc], s=14, color="#9ca3af", label="discarded", zorder=2)
        ax.scatter([p["n"] for p in kept], [p["bpb"] for p in kept], s=30, color="#16a34a", label="kept", zorder=3)
        best, last_n, labelled = running_best(pts), pts[-1]["n"], False
        for era_imported in (True, False):   # one step line per era: imported, then the tag's own
            seg = [(n, b) for (n, b) in best if (n <= imported) == era_imported]
            if seg:
                end = max(imported if era_imported else last_n, seg[-1][0])
                ax.step([n for n, _ in seg] + [end], [b for _, b in seg] + [seg[-1][1]], where="post",
                        color="#15803d", linewidth=1.5, label=None if labelled else "running best")
                labelled = True
        for p in kept:
            ax.annotate(p["description"][:LABEL_CHARS], (p["n"], p["bpb"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=6, color="#166534")
        crashes = [p["n"] for p in pts if p["bpb"] is None]
        if crashes:
            low = min(p["bpb"] for p in measured)
            ax.scatter(crashes, [low] * len(crashes), marker="x", s=14, color="#dc2626", label="crashed", zorder=2)
        ax.set_xlabel("experiment")
        ax.set_ylabel("val_bpb (lower is better)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
