"""The morning report: what a run kept, why, what each kept change is worth, and what it cost.

    uv run agent/report.py --run DIR [--ablate] [--branches] [--validate K]

Reads a run folder (journal.jsonl, results.tsv, run.json, the worktree's git history) and writes
<run>/report/report.md and a self-contained <run>/report/report.html (inline SVG progress figure):
each kept change in order with its diff, hypothesis and measured gain against the judge's noise
band; the discards grouped by idea with their best result; crashes by class; tokens, dollars and
GPU-seconds. `--ablate` re-runs the final best once without each kept change (leave-one-out),
measured the way the run measured (sealed training + trusted evaluation for the judge hierarchy,
the printed val_bpb for the simple reviewer); results are cached in <run>/report/ablations.json,
so a second report is free. `--branches` makes one branch per kept change,
autoresearch/<tag>-change-<k>: the base commit plus that change alone, or says it does not apply
alone. Run it on a stopped run (it trains in a scratch worktree, never in the run's own: both
are agent/report_ablate.py).
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from html import escape
from pathlib import Path

from agent import budget, report_share
from agent.report_figures import device_seconds, kept_baseline, records_from_results, wall_seconds
from agent.judges import confirm
from harness.results_table import bpb_figure, figure_text, fnum
from runfiles.journal import STEPPED_BACK, Measurement
from harness.experiment_record import ExperimentRecord
from runfiles.run import RunInfo
from harness.results import read_journal
from runfiles.shared_results import ABLATIONS, REPORT_DIR, ImportedInfo, Validation
from harness.secrets import clean_text

# Diff lines shown per kept change in the report (the whole diff stays in the journal).
DIFF_LINES = 80
# Words of a description that name an idea when its diff is not a knob change ("lr 0.03" -> "lr").
IDEA_WORDS = 3
# Past this magnitude a figure is printed in short scientific form (never 309 digits of 1e308).
LONG_FIGURE = 1e6


class ReportError(Exception):
    """Nothing to report on (no journal, no experiments); the message says which run."""


def bpb_of(rec: ExperimentRecord) -> float | None:
    """The figure a decision rested on: trusted when verified, else the printed val_bpb; None
    when it cannot be a val_bpb (negative, or beyond harness/results_table.py MAX_BPB: an imported
    1e308 is no result, and the report neither prints nor draws it as one)."""
    return bpb_figure(rec.decision_bpb)


def _find(d, key):
    """First value of `key` anywhere in nested dicts (judge verdicts nest their rule opinion)."""
    if isinstance(d, dict):
        if key in d and d[key] is not None:
            return d[key]
        for v in d.values():
            got = _find(v, key)
            if got is not None:
                return got
    return None


def load(run: Path) -> dict:
    """The run's journal (its experiment records, typed), run.json, the base commit."""
    run = Path(run)
    journal, problems = read_journal(run / "journal.jsonl")
    records = report_share.own_records([ExperimentRecord.from_dict(r) for r in journal])   # not imported ones
    source = "journal.jsonl"
    if not (run / "journal.jsonl").exists() and (run / "results.tsv").exists():
        records, source = records_from_results(run / "results.tsv"), "results.tsv"   # a reference run's folder
    info = RunInfo.read(run / "run.json") or RunInfo()
    base = info.base_commit or (records[0].commit if records else None)
    return {"run": run, "records": records, "problems": problems, "info": info, "base": base,
            "tag": info.tag or run.name, "source": source, "claims": confirm.read_claims(run / "journal.jsonl")}


def kept_changes(data: dict) -> list[ExperimentRecord]:
    return [r for r in data["records"] if r.status == "keep" and r.parent and r.commit != data["base"]]


def _parent_config(rec: ExperimentRecord, by_commit: dict) -> dict | None:
    parent = by_commit.get(rec.parent) if isinstance(rec.parent, str) else None
    return parent.config if parent else None


def idea_of(rec: ExperimentRecord, by_commit: dict) -> str:
    """Knob names a change moved (same code), else the first words of its description."""
    parent = by_commit.get(rec.parent) if isinstance(rec.parent, str) else None
    if parent and parent.code and parent.code == rec.code:
        old, new = parent.config or {}, rec.config or {}
        moved = sorted(k for k in new if old.get(k) != new.get(k))
        if moved:
            return "knobs: " + ", ".join(moved)
    words = re.findall(r"[a-z_]+", rec.text("description").lower())
    return "idea: " + (" ".join(words[:IDEA_WORDS]) or "(no description)")


def runs_total(recs: list[ExperimentRecord]) -> dict:
    """Training runs the judge's decisions took (each record's evidence; one per older record)."""
    out = {"runs": 0, "decisions": 0, "baseline": 0, "confirming": 0}
    for r in recs:
        ev = r.evidence_view()
        k = ev.runs_spent if ev else (1 if r.status in ("keep", "discard") and r.trusted_bpb is not None else 0)
        out["runs"] += k
        out["decisions"] += 1
        if r.is_baseline:
            out["baseline"] += k
        else:
            out["confirming"] += max(0, k - 1)
    return out


def summarize(data: dict) -> dict:
    recs = data["records"]
    by_commit = {r.commit: r for r in recs if r.commit and isinstance(r.commit, str)}
    baseline = kept_baseline(recs, data["base"])   # never a baseline try that was not kept
    changes, best = [], bpb_of(baseline) if baseline else None
    for k, rec in enumerate(kept_changes(data), start=1):
        bpb = bpb_of(rec)
        judge = rec.judge
        ev = rec.evidence_view()
        changes.append({"k": k, "n": rec.n, "commit": rec.commit, "parent": rec.parent,
                        "description": rec.description, "hypothesis": rec.hypothesis,
                        "diff": rec.diff or "", "bpb": bpb, "before": best,
                        "gain": (best - bpb) if best is not None and bpb is not None else None,
                        "threshold": fnum(_find(judge, "threshold")), "spread": fnum(_find(judge, "spread")),
                        "reason": rec.decision_reason,
                        "evidence": ev.summary() if ev else None, "unshown": rec.decision_bpb if bpb is None else None,
                        "label": confirm.label(rec, data["claims"] if "claims" in data else [])})
        if bpb is not None:
            best = bpb
    groups = defaultdict(list)
    for rec in recs:
        if rec.status == "discard" and not rec.is_baseline:
            groups[idea_of(rec, by_commit)].append(rec)
    discards = []
    for idea, rs in groups.items():
        measured = [r for r in rs if bpb_of(r) is not None]
        top = min(measured, key=bpb_of) if measured else None
        discards.append({"idea": idea, "count": len(rs), "experiments": [r.n for r in rs],
                         "best": bpb_of(top) if top else None, "best_n": top.n if top else None,
                         "best_description": top.description if top else rs[-1].description})
    discards.sort(key=lambda d: (-d["count"], d["best"] if d["best"] is not None else 1e9))
    crashes = Counter(r.crash_class or "unknown" for r in recs if r.status == "crash")
    tokens = {"input": 0, "output": 0}
    cost = 0.0
    for r in recs:
        for key, count in r.token_counts().items():
            tokens[key] += count
        cost += r.cost()
    gpu, wall = sum(device_seconds(r) for r in recs), wall_seconds(recs)
    live = [c for c in changes if c["label"] != STEPPED_BACK]   # the branch holds these (a step back undid the rest)
    final = live[-1] if live else None
    return {"tag": data["tag"], "base": data["base"], "experiments": len(recs), "baseline": baseline,
            "baseline_bpb": bpb_of(baseline) if baseline else None, "changes": changes, "discards": discards,
            "crashes": dict(crashes.most_common()), "tokens": tokens, "cost_usd": cost, "gpu_seconds": gpu,
            "wall_seconds": wall, "final": final["commit"] if final else data["base"],
            "night": budget.night_lines(recs), "runs": runs_total(recs),
            "source": data["source"] if "source" in data else "journal.jsonl",
            "final_bpb": final["bpb"] if final else (bpb_of(baseline) if baseline else None),
            "headline": confirm.headline(data["claims"] if "claims" in data else [])}


# ---- rendering -----------------------------------------------------------------------------------

def _f(v, digits=6) -> str:
    """A figure as the report prints it: "-" for none (or a value that is no number)."""
    v = fnum(v)
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if abs(v) < LONG_FIGURE else f"{v:.3g}"


def _t(text) -> str:
    """Proposed or imported text in the report: cleaned (harness/secrets.py clean_text) onto one
    line, so a newline in a description cannot start a heading or a section of its own."""
    return clean_text(text if text is not None else "", one_line=True)


def _ablation_line(c: dict, abl: dict | None) -> str:
    if not abl:
        return "not measured (run with --ablate)"
    m = Measurement.of(abl[c["commit"]] if c["commit"] in abl else None, figure="bpb")
    final = Measurement.of(abl["final"] if "final" in abl else None, figure="bpb")
    without_it, with_it = bpb_figure(m.bpb), bpb_figure(final.bpb)   # ablations.json is a file: guarded too
    if not (m.ok and final.ok) or without_it is None or with_it is None:
        return f"no figure: {_t(m.reason or final.reason or 'not measured')}"
    worth = without_it - with_it
    verdict = "it still helps" if worth > (c["threshold"] or 0) else "within noise of the final: may be redundant now"
    return f"final without it {_f(without_it)} vs final {_f(with_it)}: worth {worth:+.6f} ({verdict})"


def markdown(s: dict, abl: dict | None, branches: list[dict] | None, figure: str | None) -> str:
    lines = [f"# Morning report: {s['tag']}", ""]
    if s["headline"]:   # the final re-measured on fresh seeds: the night's figure, never a lucky run's
        lines += [f"**Headline: {s['headline']}.**", ""]
    lines += [f"{s['experiments']} experiments; baseline {_f(s['baseline_bpb'])} -> final {_f(s['final_bpb'])} "
              f"as recorded (commit {str(s['final'])[:7]}); {len(s['changes'])} kept change(s).", ""]
    if s["source"] == "results.tsv":
        lines += ["Read from results.tsv alone (no journal.jsonl here): no diffs, hypotheses, judge figures or costs.", ""]
    if figure:
        lines += [f"![progress]({figure})", ""]
    lines += ["## Kept changes, in order", ""]
    for c in s["changes"]:
        band = f"noise band {_f(c['threshold'])} (spread {_f(c['spread'])})" if c["threshold"] else "noise band unknown"
        # a diff shows what the code holds: an invisible or control character in it is marked, not dropped
        diff = [" " + ln if ln.startswith("```") else ln
                for ln in clean_text(c["diff"], mark=True).splitlines()]
        shown = diff[:DIFF_LINES] + ([f"... ({len(diff) - DIFF_LINES} more lines)"] if len(diff) > DIFF_LINES else [])
        unshown = f" (its recorded figure {_f(c['unshown'])} is no val_bpb: left out)" if c["unshown"] is not None else ""
        lines += [f"### {c['k']}. experiment {c['n']}: {_t(c['description'])}", "",
                  f"- hypothesis: {_t(c['hypothesis']) or '-'}",
                  f"- measured: {_f(c['bpb'])} after {_f(c['before'])}: gain {_f(c['gain'])}, {band}{unshown}",
                  f"- judge: {_t(c['reason']) or '-'}",
                  f"- claim: {c['label']}" + {"not confirmed": " (fresh runs did not pass the test against its parent's)",
                                               STEPPED_BACK: " (the night's end undid it on the branch: its fresh runs "
                                                             "did not hold it below its parent)"}.get(c["label"], ""),
                  f"- evidence: {_t(c['evidence']) or 'not recorded (a journal from before the judge recorded its runs)'}",
                  f"- leave-one-out: {_ablation_line(c, abl)}"]
        for b in branches or []:
            if b["k"] == c["k"]:
                lines.append(f"- branch: `{b['branch']}`" if b["branch"] else f"- branch: none, {_t(b['note'])}")
        lines += ["", "```diff", *shown, "```", ""]
    if not s["changes"]:
        lines += ["Nothing was kept beyond the baseline.", ""]
    lines += ["## Discards, grouped by idea", "", "| idea | tries | best val_bpb | best try |", "| --- | --- | --- | --- |"]
    for d in s["discards"]:
        cells = [_t(d["idea"]), _t(d["best_description"])[:80]]
        idea, desc = (c.replace("|", "\\|") for c in cells)   # a "|" in a cell would end it
        lines.append(f"| {idea} | {d['count']} | {_f(d['best'])} | {'#' + str(d['best_n']) + ' ' if d['best_n'] else ''}{desc} |")
    lines += ["", "## Crashes by class", ""]
    lines += [f"- {_t(k)}: {v}" for k, v in s["crashes"].items()] or ["- none"]
    lines += ["", "## Cost", "", f"- tokens: {figure_text(s['tokens']['input'], ',.0f')} in, "
              f"{figure_text(s['tokens']['output'], ',.0f')} out",
              f"- dollars: ${figure_text(s['cost_usd'], '.2f')}",
              f"- device-seconds (every training run + its trusted evaluation): {figure_text(s['gpu_seconds'], '.0f')}",
              f"- wall seconds with an experiment under way: {figure_text(s['wall_seconds'], '.0f')}",
              f"- training runs: {s['runs']['runs']} for {s['runs']['decisions']} decisions "
              f"({s['runs']['baseline']} for the baseline, {s['runs']['confirming']} confirming or replacing a disturbed run)",
              *[f"- hand-over: {_t(line)}" for line in s["night"]], ""]
    return "\n".join(lines)


HTML_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#111827}"
              "pre{background:#f6f8fa;padding:.6em;overflow:auto;font-size:12px}.add{color:#1a7f37}.del{color:#cf222e}"
              "table{border-collapse:collapse}td,th{border:1px solid #d1d5db;padding:.2em .5em;text-align:left}")


def html_page(md_text: str, svg: str | None) -> str:
    """A self-contained page from the markdown (headings, lists, tables, diff blocks) + inline SVG."""
    out, in_code, table = [], False, False
    for line in md_text.splitlines():
        if line.startswith("```"):
            out.append("<pre>" if not in_code else "</pre>")
            in_code = not in_code
            continue
        if in_code:
            cls = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
            out.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
            continue
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if set("".join(cells)) <= set("- "):
                continue
            if not table:
                out.append("<table>")
                table = True
            out.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
            continue
        if table:
            out.append("</table>")
            table = False
        if line.startswith("!["):
            out.append(svg or "")
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{escape(line[level:].strip())}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<li>{escape(line[2:])}</li>")
        elif line.strip():
            out.append(f"<p>{escape(line)}</p>")
    if table:
        out.append("</table>")
    body = "\n".join(out)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>morning report</title>'
            f"<style>{HTML_STYLE}</style></head><body>\n{body}\n</body></html>\n")


def progress_figure(data: dict) -> str | None:
    try:
        from dashboard.chart import progress_svg
        from dashboard.data import read_results
        from dashboard.progress_points import noise_band
    except ImportError:
        return None
    rows = read_results(data["run"] / "results.tsv").lines   # every line, the malformed ones too (as the dashboard draws)
    if not rows:
        return None
    # the chart escapes its labels for SVG; the descriptions in them are cleaned here, as in the markdown
    imported = ImportedInfo.read(data["run"])   # shaded, the running best afresh after them (as progress.png)
    return clean_text(progress_svg(rows, noise_band(rows, data["records"]), imported=imported.rows if imported else 0))


def report(run: Path, ablate_runs: bool = False, branches: bool = False, measure=None, validate=None) -> dict:
    data = load(run)
    if not data["records"]:
        if not any((Path(run) / name).exists() for name in ("journal.jsonl", "results.tsv")):
            raise ReportError(f"{run}: no experiments here (neither journal.jsonl nor results.tsv)")
        raise ReportError(f"{run}: no experiments in {data['source']}")
    s = summarize(data)
    out = Path(run) / REPORT_DIR
    out.mkdir(exist_ok=True)
    if ablate_runs or branches:   # they train and make branches: agent/report_ablate.py
        from agent import report_ablate
    abl = report_ablate.ablate(data, s, measure) if ablate_runs else _cached(out, s["final"])
    made = report_ablate.make_branches(data, s) if branches else None
    svg = progress_figure(data)
    if svg:
        (out / "progress.svg").write_text(svg)
    md = report_share.extend(markdown(s, abl, made, "progress.svg" if svg else None), data, s, out, branches, validate)
    md = clean_text(md)   # whatever a section quotes (an imported branch's name, a reason): no escapes, no bidi
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(report_share.with_image(html_page(md, svg), out))
    return {"summary": s, "ablations": abl, "branches": made, "dir": out}


def _cached(out: Path, final: str) -> dict | None:
    """The ablations cached for this final best (ablations.json: final commit -> its results)."""
    try:
        cache = json.loads((out / ABLATIONS).read_text())
    except (OSError, ValueError):
        return None
    mine = cache[final] if isinstance(cache, dict) and final in cache else None
    return mine if isinstance(mine, dict) else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--run", required=True, type=Path, help="the run folder (the tag's worktree)")
    p.add_argument("--ablate", action="store_true", help="re-run the final best without each kept change")
    p.add_argument("--branches", action="store_true", help="one branch per kept change, on the tag's base, "
                   "and exp/<hardware>/<tag> at the final best")
    p.add_argument("--validate", type=float, metavar="K", help="re-run the final best and the base at K x the budget")
    p.add_argument("--confirm", nargs="?", const=0, type=int, metavar="N",
                   help="confirm experiment N's keep (default: the final) on 2 fresh seeds against its parent's runs")
    args = p.parse_args(argv)
    from agent.validate import ValidateError, confirm_run   # the re-runs (--confirm, --validate)
    if args.confirm is not None:
        try:
            confirm_run(args.run.resolve(), args.confirm or None)
        except ValidateError as exc:
            print(f"report: {exc}")
            return 1
    try:
        got = report(args.run.resolve(), args.ablate, args.branches, validate=args.validate)
    except (ReportError, ValidateError) as exc:
        print(f"report: {exc}")
        return 1
    print(f"report: {got['dir'] / 'report.md'} and report.html ({len(got['summary']['changes'])} kept changes)")
    for b in got["branches"] or []:
        print(f"  change {b['k']} (experiment {b['n']}): {b['branch'] or b['note']}")
    if args.validate is not None:       # the verdict where it was asked for, not only in report.md
        v = Validation.read(args.run.resolve())
        print(f"validate: {v.line()}" if v is not None and v.final.commit == got["summary"]["final"]
              else "validate: no verdict was written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
