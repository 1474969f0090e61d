"""The end of a run: what it found and where to look, printed when the loop stops.

Built from the tag's journal (so a resumed tag counts every session's experiments) plus this
session's wall time: why it stopped, the best val_bpb and its commit (the figure results.tsv
records: trusted when verified), keep/discard/crash counts, wall time, tokens and cost, where
results.tsv is, and the dashboard command that shows the run. An imported tag's imported
experiments (agent/import_run.py) are another machine's history: listed on a line of their own,
never the best nor the baseline here; the tag's best is what it measured itself.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from agent import budget
from agent.console import clock
from runfiles.run import RunInfo
from harness.experiment_record import experiment_records
from harness.results import read_journal
from harness.secrets import clean_text
from runfiles.shared_results import ImportedInfo


@dataclass
class EndSummary:
    tag: str
    reason: str                        # "reached --max-experiments 5", "interrupted (Ctrl-C)", ...
    counts: dict = field(default_factory=lambda: {"keep": 0, "discard": 0, "crash": 0})
    best: dict | None = None           # {"n", "commit", "val_bpb", "description"}
    baseline: float | None = None      # the first kept experiment's val_bpb, for the improvement
    baseline_n: int | None = None      # its number
    session_seconds: float = 0.0
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float = 0.0
    results_path: Path | None = None
    dashboard: str = ""
    unsealed: str | None = None        # why the runs had no sandbox (--sandbox none), else None
    night: list = field(default_factory=list)   # the cost cap and crash-streak hand-overs (agent/budget.py)
    imported: str | None = None        # the imported experiments, as history (None: none)
    headline: str | None = None        # the final re-measured on fresh seeds (agent/judges/confirm.py)


def dashboard_command(run_dir: Path, tag: str) -> str:
    """The command that shows this run: the dashboard reads every run folder below --runs."""
    return f"uv run dashboard/app.py --runs {shlex.quote(str(Path(run_dir).parent))} --tag {shlex.quote(tag)}"


def build(run_dir: Path, tag: str, reason: str, session_seconds: float, cap: float | None = None) -> EndSummary:
    journal, _problems = read_journal(Path(run_dir) / "journal.jsonl")
    records = experiment_records(journal)
    out = EndSummary(tag=tag, reason=reason, session_seconds=session_seconds,
                     results_path=Path(run_dir) / "results.tsv", dashboard=dashboard_command(run_dir, tag),
                     night=budget.night_lines(records, cap))
    out.unsealed = (RunInfo.read(Path(run_dir) / "run.json") or RunInfo()).unsealed
    out.imported = _imported_line(run_dir, [r for r in records if r.imported])
    for rec in records:
        if rec.imported:   # another machine's figure, not measured here: never the best
            continue
        if rec.status in out.counts:
            out.counts[rec.status] += 1
        for k, count in rec.token_counts().items():
            out.tokens[k] += count
        out.cost_usd += rec.cost()
        bpb = rec.decision_bpb
        if bpb is None or rec.status != "keep":
            continue
        if out.baseline is None:
            out.baseline, out.baseline_n = bpb, rec.n
        # the incumbent: the branch's last keep (under the default rule a later keep may have a
        # higher figure than an earlier lucky one; the branch holds the later)
        out.best = {"n": rec.n, "commit": rec.commit or "", "val_bpb": bpb, "description": rec.description}
    from agent.judges.confirm import headline, read_claims
    out.headline = headline(read_claims(Path(run_dir) / "journal.jsonl"))
    return out


def render(s: EndSummary) -> str:
    total = sum(s.counts.values())
    lines = [f"== autoresearch {s.tag}: stopped, {s.reason}"]
    if s.headline:
        lines.append(f"headline      {s.headline}")
    if s.unsealed:
        lines.append(f"UNSEALED      these runs had no sandbox ({s.unsealed}): the results are NOT trusted")
    if s.best:
        gain = ""
        if s.baseline is not None and s.best["n"] != s.baseline_n:
            gain = f" ({s.best['val_bpb'] - s.baseline:+.6f} vs the first kept {s.baseline:.6f})"
        lines.append(f"best val_bpb  {s.best['val_bpb']:.6f} at {s.best['commit'][:7]} "
                     f"(exp {s.best['n']}: {clean_text(s.best['description'], one_line=True)}){gain}"
                     + (" (as recorded: the headline above is the re-measured figure)" if s.headline else ""))
    else:
        lines.append("best val_bpb  - (no experiment was kept" + (" here yet)" if s.imported else ")"))
    lines.append(f"experiments   {total}: {s.counts['keep']} kept, {s.counts['discard']} discarded, "
                 f"{s.counts['crash']} crashed" + (" (this tag's own)" if s.imported else ""))
    if s.imported:
        lines.append(f"imported      {clean_text(s.imported, one_line=True)}")   # a branch name is any text
    lines.append(f"wall time     {clock(s.session_seconds)} this session")
    lines.append(f"tokens, cost  {s.tokens['input']:,} in / {s.tokens['output']:,} out, ${s.cost_usd:.4f}")
    lines += [f"hand-over     {line}" for line in s.night]
    lines.append(f"results       {s.results_path}")
    lines.append(f"dashboard     {s.dashboard}")
    return clean_text("\n".join(lines))   # a description in it reaches a terminal and a webhook: cleaned


def _imported_line(run_dir: Path, imported: list) -> str | None:
    """The imported experiments in one line: how many, from where, and their best as a figure of
    the original machine, not measured here."""
    if not imported:
        return None
    info = ImportedInfo.read(Path(run_dir))
    where = f" from {info.branch}" if info and info.branch else ""
    where += f" ({info.hardware})" if info and info.hardware else ""
    kept = [r.decision_bpb for r in imported if r.status == "keep" and r.decision_bpb is not None]
    there = f"; their best, {min(kept):.6f}, is the original machine's figure" if kept else ""
    return (f"{len(imported)} experiments{where}, {sum(r.status == 'keep' for r in imported)} kept{there}: "
            "history, not measured here")


def interrupted_reason(interim: tuple | None, recorded: list) -> str:
    """Why the loop stopped after Ctrl-C, saying when a finished measurement was not recorded
    (e.g. baseline run 1/2 of an experiment whose repeat was interrupted)."""
    reason = "interrupted: the running experiment was stopped; --resume continues it"
    if interim and interim[0] not in recorded:
        reason += (f" (exp {interim[0]} had finished a run that is not recorded: {interim[1]}; "
                   f"--resume measures it again)")
    return reason
