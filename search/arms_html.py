"""The arms report as one self-contained HTML page: an inline SVG regret plot and tables.

Regret at s steps = the arm's best val_bpb after s steps minus the best val_bpb any arm found
in that seed (the reference), averaged over seeds. No scripts, fonts or images are fetched.
"""
from __future__ import annotations

import html

from search.arms_stats import best_at, seed_ratio
from search.arms_stats import describe_pairs

# Plot geometry (px) and the number of points sampled along the step axis.
W, H, PAD, GRID = 720, 360, 56, 120
# One colour per arm, in ARMS order (colour-blind-safe Okabe-Ito palette).
COLOURS = ["#000000", "#E69F00", "#0072B2", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442"]


def regret_curves(report: dict) -> tuple[list[float], dict[str, list[float | None]]]:
    budget = report["settings"]["budget_steps"]
    xs = [budget * (k + 1) / GRID for k in range(GRID)]
    curves = {}
    for arm in report["arms"]:
        ys = []
        for x in xs:
            vals = []
            for seed in report["per_seed"].values():
                ref, traj = seed["reference_best"], seed["trajectories"].get(arm) or []
                b = best_at(traj, x)
                if b is None or ref is None:
                    vals = None
                    break
                vals.append(b - ref)
            ys.append(None if vals is None else sum(vals) / len(vals))
        curves[arm] = ys
    return xs, curves


def svg_plot(report: dict) -> str:
    xs, curves = regret_curves(report)
    ymax = max((y for ys in curves.values() for y in ys if y is not None), default=1.0) or 1.0
    xmax = xs[-1] if xs else 1

    def px(x, y):
        return PAD + (W - 2 * PAD) * x / xmax, H - PAD - (H - 2 * PAD) * y / ymax

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             f'role="img" aria-label="mean regret against steps">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#444"/>']
    for k in range(5):                                   # axis ticks
        x, y = xmax * k / 4, ymax * k / 4
        X, _ = px(x, 0)
        _, Y = px(0, y)
        parts.append(f'<text x="{X:.1f}" y="{H - PAD + 18}" font-size="11" text-anchor="middle">{x:.0f}</text>')
        parts.append(f'<text x="{PAD - 6}" y="{Y + 4:.1f}" font-size="11" text-anchor="end">{y:.3f}</text>')
        parts.append(f'<line x1="{PAD}" y1="{Y:.1f}" x2="{W - PAD}" y2="{Y:.1f}" stroke="#eee"/>')
    parts.append(f'<text x="{W / 2}" y="{H - 12}" font-size="12" text-anchor="middle">training steps spent</text>')
    parts.append(f'<text x="14" y="{H / 2}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 14 {H / 2})">regret (val_bpb above best found)</text>')
    for i, (arm, ys) in enumerate(curves.items()):
        colour = COLOURS[i % len(COLOURS)]
        pts = " ".join("%.1f,%.1f" % px(x, y) for x, y in zip(xs, ys) if y is not None)
        if pts:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>')
        parts.append(f'<rect x="{W - PAD - 110}" y="{PAD + 16 * i}" width="12" height="3" fill="{colour}"/>')
        parts.append(f'<text x="{W - PAD - 92}" y="{PAD + 16 * i + 5}" font-size="12">{html.escape(arm)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _fmt(v, digits=4):
    return "&mdash;" if v is None else f"{v:.{digits}f}"


def _seed_ratio(report: dict, seed, arm: str) -> str:
    return html.escape(seed_ratio(report, seed, arm))


def _head_cell(x, reached=True) -> str:
    return "not reached" if (x is None or not reached) else f"{x:.3f}"


def _spread_cell(q: dict) -> str:
    if q["mean"] is None:
        return "&mdash;"
    return f"{q['mean']:.4f} <small>[{q['min']:.4f}&ndash;{q['max']:.4f}]</small>"


def _verdict(p: dict) -> str:
    return {"a better": f"{p['a']} better", "b better": f"{p['b']} better"}.get(p["verdict"], p["verdict"])


def separation_section(report: dict) -> str:
    sep = report.get("separation")
    if not sep:
        return ""
    n = len(report["per_seed"])
    rows = []
    for key, what in (("headline", "headline"), ("final_quality", "final val_bpb")):
        told, same = describe_pairs(sep[key])
        rows.append(f"<tr><td>{what}</td><td>{html.escape(', '.join(told)) or 'none'}</td>"
                    f"<td>{html.escape(', '.join(same)) or 'none'}</td></tr>")
    paired = "".join(
        f"<tr><td>{html.escape(p['a'])} vs {html.escape(p['b'])}</td><td>{p['a_better_seeds']}/{p['n']}</td>"
        f"<td>{p['b_better_seeds']}/{p['n']}</td><td>{p['ties']}</td><td>{html.escape(_verdict(p))}</td>"
        f"<td>{p['chance']:.2f}</td></tr>"
        for p in sep["headline"])
    return f"""<h2>Can the arms be told apart?</h2>
<p>Two arms are told apart only when their ranges across seeds do not overlap (every seed of one better
than every seed of the other). Each such verdict gives how often that would happen by chance with {n}
seeds: 2/C(2n,n) between two arms that vary, 2/2<sup>n</sup> against random's headline (1 in every
seed by definition). Otherwise they <b>cannot be told apart</b> by this run.</p>
<table><tr><th>measure</th><th>told apart (&lt; = better)</th><th>cannot be told apart</th></tr>{''.join(rows)}</table>
<p>Headline, paired by seed (a seed where an arm never reached the target counts as worst):</p>
<table><tr><th>pair</th><th>first better</th><th>second better</th><th>ties</th><th>verdict</th><th>chance</th></tr>{paired}</table>
"""


def fairness_section(report: dict) -> str:
    fair = report.get("fairness")
    if not fair:
        return ""
    warn = "".join(f"<li>{html.escape(w)}</li>" for w in fair["warnings"])
    rows = "".join(f"<tr><td>{html.escape(a)}</td><td>{p['brackets']}</td><td>{p['configs']}</td>"
                   f"<td>{p['full_evals']}</td><td>{p['steps']}</td><td>{p['unused']}</td></tr>"
                   for a, p in fair["plans"].items())
    verdict = (f'<p class="warn"><b>Warning: the budget was too small for a fair comparison.</b></p><ul>{warn}</ul>'
               if warn else "<p>The budget is fair by these checks: whole Hyperband cycles (every bracket "
                            "runs to completion equally often), random search draws at least as many "
                            "configurations as the widest bracket, no arm leaves over 10% unspent.</p>")
    return f"""<h2>Is the budget fair?</h2>
{verdict}
<table><tr><th>arm</th><th>brackets / rounds</th><th>configurations</th><th>full evaluations</th>
<th>steps planned</th><th>unused</th></tr>{rows}</table>
<p>Computed from the budget before running (the scheduler's rule: a bracket starts only if its whole
cost fits); the smallest fair budget for these settings is {fair['fair_budget']} steps.</p>
"""


def _fidelity(acct: dict) -> str:
    f = acct.get("fidelity")
    if not f or not f["rounds_checked"]:
        return "&mdash;"
    return f"{f['hits']}/{f['rounds_checked']} (regret {f['mean_regret']:.4f})"


def screen_section(report: dict) -> str:
    """Where each screen arm's steps went (screen vs the winners' full runs), per seed."""
    screens = report.get("screen") or {}
    if not screens:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(arm)}</td><td>{html.escape(str(seed))}</td><td>{a['rounds']}</td>"
        f"<td>{a['candidates_screened']}</td><td>{a['screen_steps']}</td><td>{a['full_steps']}</td>"
        f"<td>{a['total_steps']}</td><td>{_seed_ratio(report, seed, arm)}</td>"
        f"<td>{_fmt(report['per_seed'][seed]['quality'][arm]['100%'])}</td><td>{_fidelity(a)}</td></tr>"
        for arm, per_seed in screens.items() for seed, a in per_seed.items())
    shapes = "; ".join(f"{html.escape(arm)}: {html.escape(next(iter(p.values()))['shape'])}"
                       for arm, p in screens.items())
    return f"""<h2>Does screening pay?</h2>
<p>A screen-K round draws K candidates from the random arm's stream, screens them by successive halving
(checkpoint promotion, the same cool-down branch before each evaluation) and trains only the winner on to
the full budget; only full runs count as results, every step is charged. Rounds: {shapes}.</p>
<table><tr><th>arm</th><th>seed</th><th>rounds</th><th>screened</th><th>screen steps</th>
<th>full-run steps</th><th>total</th><th>headline</th><th>final val_bpb</th><th>picked the full-run best</th></tr>{rows}</table>
<p>"Picked the full-run best": rounds whose K candidates the random arm (same stream) also trained in full,
and in how many the screen's winner was the best of them (mean val_bpb lost to the best when it was not).</p>
"""


def samplers_section(report: dict) -> str:
    """The Optuna studies' summaries and what each LLM-backed arm asked and paid, per seed."""
    rows = []
    for key, x in (report.get("extras") or {}).items():
        seed, arm = key.split("/", 1)
        study = x.get("study") or {}
        best = study.get("best") or {}
        tokens = x.get("tokens") or {}
        ideas = "; ".join(f"{i['name']}: {i['description']}" for i in x.get("ideas") or [])
        errors = "; ".join(x.get("errors") or [])
        rows.append(f"<tr><td>{html.escape(arm)}</td><td>{html.escape(seed)}</td>"
                    f"<td>{html.escape(str(study.get('sampler', '&mdash;')))}</td>"
                    f"<td>{best.get('number', '&mdash;')}</td>"
                    f"<td>{tokens.get('input', 0)} / {tokens.get('output', 0)}</td>"
                    f"<td>{x.get('cost_usd', 0.0):.4f}</td><td>{html.escape(ideas) or '&mdash;'}</td>"
                    f"<td>{html.escape(errors) or '&mdash;'}</td></tr>")
    if not rows:
        return ""
    return f"""<h2>Samplers and LLM use</h2>
<p>Optuna arms: one study per seed, its first trials the random arm's own configurations; "best trial"
is the trial number of the study's best. LLM-backed arms: tokens (input / output) and dollars per seed;
the hybrid's code ideas, and why any were left out.</p>
<table><tr><th>arm</th><th>seed</th><th>sampler</th><th>best trial</th><th>tokens in / out</th><th>$</th>
<th>ideas</th><th>errors</th></tr>{''.join(rows)}</table>
"""


def render_html(report: dict) -> str:
    s = report["settings"]
    arms = report["arms"]
    head = report["headline"]
    head_rows = "".join(
        f"<tr><td>{html.escape(a)}</td>"
        + "".join(f"<td>{_seed_ratio(report, seed, a)}</td>" for seed in report["per_seed"])
        + f"<td><b>{_head_cell(head[a]['median'], head[a]['median_reached'])}</b></td>"
        f"<td>{_head_cell(head[a]['min'])}&ndash;{_head_cell(head[a]['max'])}</td>"
        f"<td>{head[a]['reached']}</td></tr>" for a in arms)
    q_rows = "".join(
        f"<tr><td>{html.escape(a)}</td>" + "".join(f"<td>{_spread_cell(v)}</td>" for v in report["quality"][a].values())
        + "</tr>" for a in arms)
    seeds = "".join(f"<th>seed {html.escape(str(k))}</th>" for k in report["per_seed"])
    fracs = "".join(f"<th>{html.escape(k)}</th>" for k in next(iter(report["quality"].values())))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>arms report</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:60em}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}} td:first-child{{text-align:left}}
.warn{{color:#a00}}</style></head>
<body>
<h1>Arms: does the search learn?</h1>
<p>Identical budget of {s['budget_steps']} training steps per arm; full evaluation {s['max_steps']} steps,
lowest rung {s['min_steps']}, eta {s['eta']}, decay branch {s['decay_steps']} steps; profile {html.escape(str(s['profile']))},
data {html.escape(str(s['fingerprint']))}; seeds {html.escape(str(s['seeds']))}; {s['workers']} workers;
{report['wall_s']:.0f} s wall-clock.</p>
<h2>Headline</h2>
<p>Steps to reach random search's final quality, divided by the steps random needed (below 1: faster
than random). "Not reached": the arm never got there within the budget, so its ratio exceeds what it
spent over what random needed (shown in brackets). The median is over <b>all</b> seeds, an unreached
seed counting as worse than any reached one; it reads "not reached" when half the seeds or more missed.</p>
<table><tr><th>arm</th>{seeds}<th>median</th><th>range over seeds</th><th>reached</th></tr>{head_rows}</table>
{separation_section(report)}{fairness_section(report)}
<h2>Mean regret</h2>
{svg_plot(report)}
<h2>Quality (best val_bpb, mean [min&ndash;max] over seeds) at fractions of the budget</h2>
<table><tr><th>arm</th>{fracs}</tr>{q_rows}</table>
{screen_section(report)}{samplers_section(report)}<p>Generated {html.escape(str(report.get('created_at', '')))}; load average {html.escape(str(report.get('load_avg', '')))}.</p>
</body></html>
"""
