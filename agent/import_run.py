"""Import an existing autoresearch run (the reference's loop shape) into a tag, then --resume it.

    uv run agent/import_run.py --repo PATH --branch autoresearch/mar5 --results PATH/results.tsv --tag mar5-imported
    uv run agent/loop.py --repo PATH --tag mar5-imported --resume

What is read: a branch of commits (each kept experiment a commit of train.py; discarded ones were
reset away, their commits may still be in the repository) and its results.tsv in the reference's
format: the 5 columns commit, val_bpb, memory_gb, status, description, one row per experiment; the
first row's commit may be a word such as `baseline` (its commit is then the branch's first kept
change's parent, or the tip when nothing else was kept); a description may hold any text, tabs too.

What is written, only once every check passed (a bad input changes nothing):
- branch autoresearch/<tag> at the branch's tip, plus one empty commit on it, "import: ..." (the
  tag's base: the loop's first measurement is there), and its worktree;
- journal.jsonl: one record per row, proposer "imported", `imported` saying where from, unsealed
  (`sealed` false, no trusted figure: val_bpb is the original run's printed one, from its machine);
- results.tsv: the rows, in our (the same) 5-column format; discarded commits still in the
  repository kept reachable under refs/autoresearch/<tag>/discarded/<n>;
- imported.json: where from, the rows' line numbers, the budget the original run used.

run.json is written by the first `--resume`, which reads this tag as a new one: the base commit,
the data's fingerprint, the profile's knobs and the sandbox are this machine's. Recovery never
takes an imported keep for the incumbent (agent/recovery.py), so the resumed loop measures its own
baseline on the imported best (the judge's noise band, from this machine's runs) before any
experiment is judged: no figure of the original machine is ever compared with one of ours.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):   # run as a script: the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent import cli, workspace   # noqa: E402
from harness import gitops   # noqa: E402
from harness.records import ExperimentRecord   # noqa: E402
from harness.results import RESULTS_HEADER, append_journal, rewrite_results, write_json_atomic   # noqa: E402
from harness.results_table import ResultRow, parse_results   # noqa: E402
from harness.shared_results import IMPORTED_JSON   # noqa: E402

PROPOSER = "imported"
# A commit cell: an abbreviated or full hex object name (git's shortest abbreviation is 4).
HASH_RE = re.compile(r"[0-9a-fA-F]{4,40}")
# The budget the reference's runs train for, when --budget does not say (its fixed 5 minutes).
REFERENCE_BUDGET = 300.0
# A problem the row parser reports that is no problem here: a description may hold tabs.
TABS_OK = "extra tab(s) in the description"


class ImportRefused(Exception):
    """Bad input: the message says which file, line or commit; nothing was written."""


@dataclass
class Row:
    line: int
    commit: str          # the full commit, or the cell as written when the repository lacks it
    found: bool          # the commit is in the repository
    bpb: float | None
    memory_gb: float | None
    status: str
    description: str


@dataclass
class Plan:
    """Everything the import will write, checked."""
    repo: Path
    branch: str
    tip: str
    tag: str
    worktree: Path
    rows: list[Row]
    results: Path
    budget: float


def read_rows(results: Path) -> list[tuple[int, ResultRow]]:
    """(line number, row) of a reference-format results.tsv; ImportRefused on another format or a torn row."""
    try:
        text = Path(results).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportRefused(f"{results}: cannot read it ({exc})") from None
    first = text.split("\n", 1)[0].rstrip("\r")
    if first != RESULTS_HEADER:
        raise ImportRefused(f"{results}: not a results.tsv in the reference's format: line 1 is {first[:80]!r}, "
                           f"expected the 5 tab-separated columns {RESULTS_HEADER!r}")
    table = parse_results(text)
    bad = [f"line {ln.line}: {'; '.join(p for p in ln.problems if p != TABS_OK)}"
           for ln in table.lines if any(p != TABS_OK for p in ln.problems)]
    if bad:
        raise ImportRefused(f"{results}: {len(bad)} torn or malformed row(s), nothing imported: " + "; ".join(bad[:5]))
    if not table.lines:
        raise ImportRefused(f"{results}: no rows after the header")
    return [(ln.line, ln.row) for ln in table.lines]


def plan(repo: Path, branch: str, results: Path, tag: str, *, budget: float = REFERENCE_BUDGET,
         worktree_root: str | None = None, allow_missing: bool = False) -> Plan:
    """Check everything; ImportRefused with the reason on the first bad input."""
    try:
        repo = gitops.toplevel(Path(repo).resolve())
    except gitops.GitError:
        raise ImportRefused(f"{repo}: not a git repository") from None
    problem = cli.tag_problem(tag)
    if problem:
        raise ImportRefused(f"--tag {tag!r}: {problem}")
    ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
    tip = gitops.rev_parse(repo, ref)
    if tip is None:
        raise ImportRefused(f"{repo}: no branch {branch}")
    if gitops.branch_exists(repo, tag):
        raise ImportRefused(f"tag {tag!r} exists (branch {gitops.branch_name(tag)}): pick another --tag "
                           f"(the imported branch {branch} is never changed)")
    worktree = workspace.worktree_path(repo, tag, worktree_root)
    if worktree.exists():
        raise ImportRefused(f"{worktree} exists: pick another --tag or remove it")
    rows = []
    raw = read_rows(results)
    for i, (line, r) in enumerate(raw):
        cell = r.commit.strip()
        if not HASH_RE.fullmatch(cell):
            if i == 0:
                rows.append(Row(line, "", True, r.val_bpb, r.memory_gb, r.status, r.description))
                continue   # the baseline named by a word: its commit is found below
            raise ImportRefused(f"{results} line {line}: commit {cell[:40]!r} is not a commit hash "
                               "(only the first row may name its commit by a word)")
        full = gitops.rev_parse(repo, cell)
        if full is None and (r.status == "keep" or not allow_missing):
            raise ImportRefused(f"{results} line {line}: commit {cell} ({r.status}) is not in {repo}"
                               + ("" if r.status == "keep" else "; --allow-missing imports such discarded rows "
                                  "without their code"))
        rows.append(Row(line, full or cell, full is not None, r.val_bpb, r.memory_gb, r.status, r.description))
    keeps = [r for r in rows if r.status == "keep" and r.commit]
    for r in keeps:
        if not gitops.is_ancestor(repo, r.commit, tip):
            raise ImportRefused(f"{results} line {r.line}: kept commit {r.commit[:7]} is not on {branch}")
    if rows[0].commit == "":
        later = [r for r in keeps if r is not rows[0]]
        rows[0].commit = (gitops.parent_of(repo, later[0].commit) if later else tip) or tip
    last_keep = next((r for r in reversed(rows) if r.status == "keep"), None)
    if last_keep is None:
        raise ImportRefused(f"{results}: no kept row (not even the baseline): nothing to continue from")
    if last_keep.commit != tip:
        raise ImportRefused(f"{branch}'s tip {tip[:7]} is not the last kept row's commit ({last_keep.commit[:7]}, "
                           f"line {last_keep.line}): the branch holds commits results.tsv does not record, "
                           "or the reverse")
    return Plan(repo, branch, tip, tag, worktree, rows, Path(results).resolve(), float(budget))


def records_of(p: Plan) -> list[ExperimentRecord]:
    """One journal record per row, in order; each kept row's parent is the kept row before it."""
    out, parent, source = [], None, f"{p.branch} ({p.results.name})"
    for n, r in enumerate(p.rows, start=1):
        diff = ""
        if r.found and r.commit and parent:
            diff = gitops.diff(p.repo, parent, r.commit)
        crash = r.status == "crash"
        out.append(ExperimentRecord.of(
            n=n, tag=p.tag, parent=parent, commit=r.commit, short=r.commit[:7], status=r.status,
            description=r.description, proposer=PROPOSER, diff=diff,
            summary=None if crash else {"val_bpb": r.bpb, "peak_vram_mb": (r.memory_gb or 0.0) * 1024},
            crash_class="imported crash" if crash else None, memory_gb=r.memory_gb or 0.0, sealed=False,
            decision_reason=f"imported from {source} line {r.line}: the original run's {r.status}, on its "
                            "machine, unsealed and not re-evaluated",
            discarded_ref=gitops.discarded_ref(p.tag, n) if r.status != "keep" and r.found else None,
            imported=f"{p.repo}:{p.branch}"))
        if r.status == "keep":
            parent = r.commit
    return out


def write(p: Plan) -> Path:
    """Branch, worktree, the records, refs; returns the run folder (the tag's worktree)."""
    workspace._ignore_root(p.worktree.parent)
    gitops.create_worktree(p.repo, p.tag, p.worktree, p.tip)
    gitops.git(p.worktree, *gitops._identity_args(p.worktree), "commit", "-q", "--allow-empty", "-m",
               f"import: continue {p.branch} (its {len(p.rows)} experiments are imported, measured by the "
               "original run)\n\nThe loop's own measurements start here: its baseline is this train.py.")
    workspace.ignore_run_files(p.worktree)
    records = records_of(p)
    for rec in records:
        append_journal(p.worktree / "journal.jsonl", rec.to_dict())
        if rec.ident.discarded_ref:
            gitops.update_ref(p.repo, rec.ident.discarded_ref, rec.commit)
    rewrite_results(p.worktree / "results.tsv",
                    [ResultRow(r.commit, r.bpb, r.memory_gb, r.status, r.description).format() for r in p.rows])
    write_json_atomic(p.worktree / IMPORTED_JSON, {
        "repo": str(p.repo), "branch": p.branch, "tip": p.tip, "results": str(p.results),
        "rows": len(p.rows), "lines": [r.line for r in p.rows], "budget": p.budget,
        "missing_commits": [r.commit for r in p.rows if not r.found], "imported_at": time.time()})
    return p.worktree


def import_run(repo, branch, results, tag, **kw) -> Path:
    return write(plan(Path(repo), branch, Path(results), tag, **kw))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=".", help="the repository that holds the branch (the tag is made there)")
    ap.add_argument("--branch", required=True, help="the run's branch, e.g. autoresearch/mar5")
    ap.add_argument("--results", required=True, type=Path, help="its results.tsv (the reference's 5 columns)")
    ap.add_argument("--tag", required=True, help="our tag to import into (branch autoresearch/<tag>)")
    ap.add_argument("--budget", type=float, default=REFERENCE_BUDGET,
                    help="training seconds of the original runs, for the record (default %(default)g)")
    ap.add_argument("--worktree-root", help="where worktrees go (default <repo>/.autoresearch)")
    ap.add_argument("--allow-missing", action="store_true",
                    help="import discarded/crashed rows whose commits the repository no longer has")
    args = ap.parse_args(argv)
    try:
        p = plan(Path(args.repo), args.branch, args.results, args.tag, budget=args.budget,
                 worktree_root=args.worktree_root, allow_missing=args.allow_missing)
        run = write(p)
    except (ImportRefused, gitops.GitError) as exc:
        print(f"import: {exc}", file=sys.stderr)
        return 2
    kept = sum(1 for r in p.rows if r.status == "keep")
    print(f"import: {len(p.rows)} experiments ({kept} kept) from {p.branch} into tag {p.tag} ({run})\n"
          f"continue it: uv run agent/loop.py --repo {p.repo} --tag {p.tag} --resume")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
