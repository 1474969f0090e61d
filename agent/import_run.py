"""Import a run of the reference's loop (its branch and results.tsv) into a tag, then --resume it.

    uv run agent/import_run.py --repo PATH --branch exp/H100/mar8 --results PATH/results.tsv --tag mar8-here
    uv run agent/loop.py --repo PATH --tag mar8-here --resume

What is read: a branch whose kept experiments are commits of train.py, and its results.tsv in the
reference's 5 columns (commit, val_bpb, memory_gb, status, description; the first row's commit may
be a word such as `baseline`, a description may hold any text, tabs too). The branch is taken as
the reference publishes it: the kept commits are found by their rows, and the last kept row's
commit is what the tag continues from, whatever the branch holds after it (an experiment that was
discarded but not reset away, a commit of results.tsv, a revert). Discarded commits are usually
gone from a published repository: that is expected, they are counted and imported without their
code. A kept commit that is missing, or not on the branch, is refused: its code is what the tag
continues. The hardware the run used comes from a branch named exp/<hardware>/<tag> (exp/H100/mar8
ran on an H100), or from --hardware.

What is written, only once every check passed (a refusal changes nothing and names the command
that would succeed, or exactly what to fix):
- branch autoresearch/<tag>: the last kept commit, then one commit on top of it that holds this
  project's own files (the tree of --base, by default your checkout's HEAD, which may not contain
  any of the imported run's experiments): the tag's base; and the tag's worktree;
- journal.jsonl: one record per row, proposer "imported", `imported` saying where from, unsealed
  and without a trusted figure: its val_bpb is the one the original run printed on its machine;
- results.tsv: the rows, in the same 5 columns; discarded commits still in the repository are kept
  reachable under refs/autoresearch/<tag>/discarded/<n>;
- imported.json: where from, the rows' line numbers, the original run's budget and hardware, the
  commit continued and the tag's base.

What the first `--resume` does: the imported code is another machine's proposal, so it is judged
like one. The tag's baseline is this project's own train.py (the base, with the profile's knob
values written in, as for any new tag), run several times: the judge's noise and the harness
clock's startup reference come from it, never from imported code. Then the imported tip's train.py
is the first experiment ("imported tip of <branch> from <hardware>", with the profile's knob
values where the imported run left a knob at its first value): guarded, trained sealed on the
harness's clock and judged against that baseline like any proposal. Kept, it is the bar; else the
project's baseline stays. The imported figures are history: the report, the dashboard and the end
summary show them as imported, never as the tag's best, and recovery never takes an imported keep
for the incumbent (agent/recovery.py).
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

if __package__ in (None, ""):   # run as a script: the project root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent import cli, workspace   # noqa: E402
from agent import gitops   # noqa: E402
from search import knobs   # noqa: E402
from harness.experiment_record import ExperimentRecord  # noqa: E402
from harness.results import RESULTS_HEADER, append_journal, rewrite_results   # noqa: E402
from runfiles.state import write_json_atomic   # noqa: E402
from harness.results_table import ResultRow, parse_results   # noqa: E402
from runfiles.shared_results import IMPORTED_JSON, ImportedInfo, clean_hardware   # noqa: E402

PROPOSER = "imported"
# The proposer of the resumed tag's first experiment: the imported tip's train.py, as a candidate.
TIP_PROPOSER = "imported-tip"
# A commit cell: an abbreviated or full hex object name (git's shortest abbreviation is 4).
HASH_RE = re.compile(r"[0-9a-fA-F]{4,40}")
# The budget the reference's runs train for, when --budget does not say (its fixed 5 minutes).
REFERENCE_BUDGET = 300.0
# A problem the row parser reports that is no problem here: a description may hold tabs.
TABS_OK = "extra tab(s) in the description"
# The branches tried first as a trusted base when --base holds imported code.
USUAL_BASES = ("main", "master")
# How a refusal names this command.
COMMAND = "uv run agent/import_run.py"


class ImportRefused(Exception):
    """Bad input: the message says which file, line or commit, and the command that would succeed
    (or exactly what to fix); nothing was written."""


@dataclass(frozen=True)
class Command:
    """The import's command line, to name the one that would succeed in a refusal."""
    repo: str
    branch: str
    results: str
    tag: str
    options: tuple = ()     # (flag, value) pairs given beyond the four above

    def line(self, *, repo: str | None = None, branch: str | None = None, tag: str | None = None, **options) -> str:
        """The command line with `repo`, `branch`, `tag` or an option (base="master") changed."""
        opts = dict(self.options)
        opts.update({"--" + k.replace("_", "-"): v for k, v in options.items()})
        words = ["--repo", repo or self.repo, "--branch", branch or self.branch, "--results", self.results,
                 "--tag", tag or self.tag]
        for flag, value in opts.items():
            if value is not None:
                words += [flag, str(value)]
        return " ".join([COMMAND, *(shlex.quote(str(w)) for w in words)])


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
    branch_tip: str      # the branch as published (it may end past the last keep)
    tip: str             # the last kept row's commit: what the tag continues
    tag: str
    worktree: Path
    rows: list[Row]
    results: Path
    budget: float
    hardware: str | None
    base_from: str       # this project's commit whose files the tag's base holds (--base)
    after_tip: int       # commits on the branch after the last kept one (not continued)


def hardware_of(branch: str) -> str | None:
    """'H100' of exp/H100/mar8 (also under refs/heads/ or a remote's name), else None."""
    parts = branch.split("/")
    for i in range(len(parts) - 2):
        if parts[i] == "exp" and i + 3 == len(parts):
            return clean_hardware(parts[i + 1])
    return None


def read_rows(results: Path) -> list[tuple[int, ResultRow]]:
    """(line number, row) of a reference-format results.tsv; ImportRefused on another format or a torn row."""
    try:
        text = Path(results).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportRefused(f"{results}: cannot read it ({exc}); pass the run's results.tsv with --results") from None
    first = text.split("\n", 1)[0].rstrip("\r")
    if first != RESULTS_HEADER:
        raise ImportRefused(f"{results}: not a results.tsv in the reference's format: line 1 is {first[:80]!r}; "
                           f"fix: its first line must be the 5 tab-separated columns {RESULTS_HEADER!r}")
    table = parse_results(text)
    bad = [f"line {ln.line}: {'; '.join(p for p in ln.problems if p != TABS_OK)}"
           for ln in table.lines if any(p != TABS_OK for p in ln.problems)]
    if bad:
        raise ImportRefused(f"{results}: {len(bad)} torn or malformed row(s), nothing imported: " + "; ".join(bad[:5])
                           + "; fix: correct or delete those lines (5 tab-separated cells each), then run the "
                           "same command again")
    if not table.lines:
        raise ImportRefused(f"{results}: no rows after the header; fix: pass the results.tsv the run wrote")
    return [(ln.line, ln.row) for ln in table.lines]


def _branch_ref(repo: Path, branch: str, cmd: Command) -> tuple[str, str]:
    """(ref, tip) of `branch`: a local branch, a remote's branch (origin/exp/H100/mar8) or a full ref."""
    refs = [branch] if branch.startswith("refs/") else [f"refs/heads/{branch}", f"refs/remotes/{branch}"]
    for ref in refs:
        tip = gitops.rev_parse(repo, ref)
        if tip is not None:
            return ref, tip
    near = _ours_last([r for r in gitops.git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads",
                                             "refs/remotes", check=False).splitlines()
                       if r.endswith("/" + branch.split("/", 1)[-1])])
    if near:
        raise ImportRefused(f"{repo}: no branch {branch}; {near[0]} looks like it: {cmd.line(branch=near[0])}")
    raise ImportRefused(f"{repo}: no branch {branch}; fetch it first (e.g. git -C {shlex.quote(str(repo))} fetch "
                       f"https://github.com/karpathy/autoresearch {shlex.quote(branch + ':' + branch)}), then run "
                       f"{cmd.line()}")


def _ours_last(names: list[str]) -> list[str]:
    """Branch names with this loop's own (autoresearch/<tag>, which a reference run may share) last."""
    return sorted(names, key=lambda n: n.startswith(gitops.BRANCH_PREFIX))


def _free_tag(repo: Path, tag: str, worktree_root: str | None) -> str:
    for k in range(2, 100):
        name = f"{tag}-{k}"
        if not gitops.branch_exists(repo, name) and not workspace.worktree_path(repo, name, worktree_root).exists() \
                and cli.tag_problem(name) is None:
            return name
    return f"{tag}-{int(time.time())}"


def base_problem(repo: Path, base: str, first: str | None, tip: str) -> str | None:
    """The imported run's commit that `base` contains beyond its first row (the original baseline),
    or None: the tag's base must be this project's own code, never one of the imported experiments."""
    for m in gitops.git(repo, "merge-base", "--all", base, tip, check=False).split():
        if first is None or not gitops.is_ancestor(repo, m, first):
            return m
    return None


def _base_fix(repo: Path, first: str | None, tip: str, cmd: Command, imported: str) -> str:
    """The way out when --base cannot be the tag's base: a local branch that can, else what to do."""
    names = gitops.git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads", check=False).split()
    order = [n for n in USUAL_BASES if n in names] + [n for n in names if n not in USUAL_BASES]
    for name in order:
        commit = gitops.rev_parse(repo, name)
        if name.startswith(gitops.BRANCH_PREFIX) or name == imported or commit is None:
            continue
        if base_problem(repo, commit, first, tip) is None and _has_train(repo, commit):
            return f"run {cmd.line(base=name)}"
    return "commit your project's own train.py on a branch of its own and pass it with --base"


def _has_train(repo: Path, commit: str) -> bool:
    try:
        gitops.show_file(repo, commit, "train.py")
    except gitops.GitError:
        return False
    return True


def _trusted_base(repo: Path, base: str, first: str | None, tip: str, cmd: Command, imported: str) -> str:
    """The commit of --base, checked: it exists, has a train.py, and holds none of the imported run's
    experiments (its baseline commit may be in it: that is the project's own code)."""
    commit = gitops.rev_parse(repo, base)
    if commit is None:
        raise ImportRefused(f"--base {base}: no such commit in {repo}; {_base_fix(repo, first, tip, cmd, imported)}")
    if not _has_train(repo, commit):
        raise ImportRefused(f"--base {base} ({commit[:7]}) has no train.py: the tag's baseline is this project's "
                           f"train.py; {_base_fix(repo, first, tip, cmd, imported)}")
    held = base_problem(repo, commit, first, tip)
    if held is not None:
        raise ImportRefused(f"--base {base} ({commit[:7]}) holds the imported run's own commit {held[:7]}: the tag's "
                           f"baseline must be this project's train.py, never imported code; "
                           f"{_base_fix(repo, first, tip, cmd, imported)}")
    return commit


def plan(repo: Path, branch: str, results: Path, tag: str, *, budget: float = REFERENCE_BUDGET,
         worktree_root: str | None = None, hardware: str | None = None, base: str = "HEAD",
         allow_missing: bool | None = None) -> Plan:
    """Check everything; ImportRefused with the reason and the way out on the first bad input.
    `allow_missing` is accepted for old command lines: missing discarded commits are always fine."""
    options = tuple((f, v) for f, v in (("--budget", None if budget == REFERENCE_BUDGET else f"{budget:g}"),
                                        ("--worktree-root", worktree_root), ("--hardware", hardware),
                                        ("--base", None if base == "HEAD" else base)) if v is not None)
    cmd = Command(str(repo), branch, str(results), tag, options)
    try:
        repo = gitops.toplevel(Path(repo).resolve())
    except (gitops.GitError, OSError):
        raise ImportRefused(f"{repo}: not a git repository; pass the repository that holds the branch: "
                           f"{cmd.line(repo='PATH')}") from None
    cmd = replace(cmd, repo=str(repo))
    problem = cli.tag_problem(tag)
    if problem:
        raise ImportRefused(f"--tag {tag!r}: {problem}; e.g. {cmd.line(tag='imported')}")
    ref, branch_tip = _branch_ref(repo, branch, cmd)
    if gitops.branch_exists(repo, tag) or workspace.worktree_path(repo, tag, worktree_root).exists():
        raise ImportRefused(f"tag {tag!r} exists (branch {gitops.branch_name(tag)} or its worktree): pick another "
                           f"tag: {cmd.line(tag=_free_tag(repo, tag, worktree_root))} (the branch {branch} is "
                           "never changed)")
    worktree = workspace.worktree_path(repo, tag, worktree_root)
    rows = []
    for i, (line, r) in enumerate(read_rows(results)):
        cell = r.commit.strip()
        if not HASH_RE.fullmatch(cell):
            if i == 0:
                rows.append(Row(line, "", True, r.val_bpb, r.memory_gb, r.status, r.description))
                continue   # the baseline named by a word: its commit is found below
            raise ImportRefused(f"{results} line {line}: commit {cell[:40]!r} is not a commit hash (only the first "
                               "row may name its commit by a word); fix: write that row's commit hash in its first cell, then run the same command again")
        full = gitops.rev_parse(repo, cell)
        if full is None and r.status == "keep":
            shallow = gitops.git(repo, "rev-parse", "--is-shallow-repository", check=False) == "true"
            how = f"git -C {shlex.quote(str(repo))} fetch --unshallow" if shallow else \
                f"git -C {shlex.quote(str(repo))} fetch <the run's remote> {shlex.quote(branch)}"
            raise ImportRefused(f"{results} line {line}: kept commit {cell} is not in {repo}: the tag continues from "
                               f"the kept commits, so their code must be here; fetch the run's full branch ({how}), "
                               f"or pass the results.tsv of {branch}, then run {cmd.line()}")
        rows.append(Row(line, full or cell, full is not None, r.val_bpb, r.memory_gb, r.status, r.description))
    keeps = [r for r in rows if r.status == "keep" and r.commit]
    for r in keeps:
        if not gitops.is_ancestor(repo, r.commit, branch_tip):
            holder = _ours_last(gitops.git(repo, "for-each-ref", "--contains", r.commit, "--format=%(refname:short)",
                                           "refs/heads", "refs/remotes", check=False).split())
            fix = f"run {cmd.line(branch=holder[0])}" if holder else \
                "pass the branch this results.tsv belongs to with --branch"
            raise ImportRefused(f"{results} line {r.line}: kept commit {r.commit[:7]} is not on {branch}; {fix}")
    if rows[0].commit == "":
        later = [r for r in keeps if r is not rows[0]]
        rows[0].commit = (gitops.parent_of(repo, later[0].commit) if later else branch_tip) or branch_tip
    last_keep = next((r for r in reversed(rows) if r.status == "keep"), None)
    if last_keep is None:
        raise ImportRefused(f"{results}: no kept row, not even the baseline: nothing to continue from; fix: its "
                           f"first row (line {rows[0].line}) is the run's baseline, status keep")
    after = len(gitops.git(repo, "rev-list", f"{last_keep.commit}..{branch_tip}").split())
    base_from = _trusted_base(repo, base, rows[0].commit or None, branch_tip, cmd, branch)
    hw = clean_hardware(hardware) if hardware else hardware_of(ref)
    return Plan(repo, branch, branch_tip, last_keep.commit, tag, worktree, rows, Path(results).resolve(),
                float(budget), hw, base_from, after)


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
    """Branch (the last kept commit, then the base), worktree, records, refs; returns the run folder."""
    message = (f"import: this project's own files as the base of a continued run of {p.branch}\n\n"
               f"The parent is the last kept commit of the imported run ({len(p.rows)} experiments, measured "
               "on its own machine). Here the loop's baseline is this project's train.py; the imported "
               "train.py is its first experiment, judged like any proposal.\n")
    base = gitops.git(p.repo, *gitops._identity_args(p.repo), "commit-tree", f"{p.base_from}^{{tree}}",
                      "-p", p.tip, input=message)
    workspace._ignore_root(p.worktree.parent)
    gitops.create_worktree(p.repo, p.tag, p.worktree, base)
    workspace.ignore_run_files(p.worktree)
    records = records_of(p)
    for rec in records:
        append_journal(p.worktree / "journal.jsonl", rec.to_dict())
        if rec.discarded_ref:
            gitops.update_ref(p.repo, rec.discarded_ref, rec.commit)
    rewrite_results(p.worktree / "results.tsv",
                    [ResultRow(r.commit, r.bpb, r.memory_gb, r.status, r.description).format() for r in p.rows])
    info = {"repo": str(p.repo), "branch": p.branch, "tip": p.tip, "branch_tip": p.branch_tip,
            "after_tip": p.after_tip, "base": base, "base_from": p.base_from, "results": str(p.results),
            "rows": len(p.rows), "lines": [r.line for r in p.rows], "budget": p.budget,
            "missing_commits": [r.commit for r in p.rows if not r.found], "imported_at": time.time()}
    if p.hardware:
        info["hardware"] = p.hardware
    write_json_atomic(p.worktree / IMPORTED_JSON, info)
    return p.worktree


def import_run(repo, branch, results, tag, **kw) -> Path:
    return write(plan(Path(repo), branch, Path(results), tag, **kw))


# ---- the resumed loop's side (agent/loop.py) ----------------------------------------------------

def check_resumable(worktree: Path) -> None:
    """Before the first --resume writes run.json: an imported tag must have a base of this
    project's own (imported.json `base`); one imported before that existed would measure the
    imported code as its baseline. workspace.SetupError with the way out."""
    info = ImportedInfo.read(worktree)
    if info is not None and not info.base:
        raise workspace.SetupError(
            f"{worktree}: this tag was imported by an earlier version, whose baseline would be the imported "
            f"code itself; import it again into a new tag: {COMMAND} --repo {shlex.quote(info.repo or 'PATH')} "
            f"--branch {shlex.quote(info.branch or 'BRANCH')} --results {shlex.quote(info.results or 'PATH/results.tsv')} "
            "--tag NEW, then --resume that tag")


def tip_proposal(repo: Path, worktree: Path, history: list, profile: str | None, base: str):
    """The resumed imported tag's first experiment, once its baseline is kept: the imported tip's
    train.py as a candidate (agent.proposers.base.Proposal), or None: not an imported tag, or it was
    tried already (the tag has an experiment of its own besides the baseline), or its train.py is
    the base's (nothing to judge). `base`: the tag's base commit (run.json)."""
    from agent.proposers.base import Proposal
    info = ImportedInfo.read(worktree)
    if info is None or not info.base or not info.tip:
        return None
    if any(not r.imported and not r.is_baseline for r in history if r.is_experiment):
        return None
    try:
        runtime = gitops.show_file(repo, base, "runtime.py")
    except gitops.GitError:   # a stand-in project without one: this checkout's table
        runtime = None
    source = gitops.show_file(repo, info.tip, "train.py")
    new, changes = knobs.for_profile(source, profile or "", runtime)
    first = next((r.commit for r in history if r.imported and r.commit), None)
    kept = moved_knobs(repo, first, source) & set(changes)
    if kept:   # the imported run's own moves stay, even one back to the repository's value
        old = knobs.values(source)
        new = knobs.set_knobs(new, {k: old[k] for k in kept})
    if new == gitops.show_file(repo, base, "train.py"):
        return None
    kept_rows = sum(1 for r in history if r.imported and r.status == "keep")
    where = f" from {info.hardware}" if info.hardware else ""
    return Proposal(
        description=f"imported tip of {info.branch}{where}",
        hypothesis=f"the imported run's {kept_rows} kept row(s) (its baseline included), measured on its own "
                   "machine, lower val_bpb here too",
        source=new, proposer=TIP_PROPOSER,
        notes=f"train.py of {info.tip[:7]}, the last kept commit of {info.branch}"
              + (f", with the {profile} profile's knob values where the run never moved a knob" if changes else ""))


def moved_knobs(repo: Path, first: str | None, source: str) -> set[str]:
    """The knobs an imported run moved: those whose value in `source` (its tip's train.py) differs
    from its first row's commit (the original baseline); every knob when that is unreadable."""
    now = knobs.values(source)
    try:
        before = knobs.values(gitops.show_file(repo, first, "train.py")) if first else None
    except gitops.GitError:
        before = None
    if before is None:
        return set(now)
    return {k for k, v in now.items() if before.get(k) != v}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--repo", default=".", help="the repository that holds the branch (the tag is made there)")
    ap.add_argument("--branch", required=True, help="the run's branch, e.g. exp/H100/mar8 or autoresearch/mar5")
    ap.add_argument("--results", required=True, type=Path, help="its results.tsv (the reference's 5 columns)")
    ap.add_argument("--tag", required=True, help="our tag to import into (branch autoresearch/<tag>)")
    ap.add_argument("--budget", type=float, default=REFERENCE_BUDGET,
                    help="training seconds of the original runs, for the record (default %(default)g)")
    ap.add_argument("--hardware", help="what the original run ran on (default: <hardware> of a branch named "
                                       "exp/<hardware>/<tag>)")
    ap.add_argument("--base", default="HEAD", help="this project's commit whose files the tag's base holds and "
                                                   "whose train.py is its baseline (default %(default)s)")
    ap.add_argument("--worktree-root", help="where worktrees go (default <repo>/.autoresearch)")
    ap.add_argument("--allow-missing", action="store_true", help=argparse.SUPPRESS)   # old command lines
    args = ap.parse_args(argv)
    try:
        p = plan(Path(args.repo), args.branch, args.results, args.tag, budget=args.budget,
                 worktree_root=args.worktree_root, hardware=args.hardware, base=args.base)
        run = write(p)
    except (ImportRefused, gitops.GitError) as exc:
        print(f"import: {exc}", file=sys.stderr)
        return 2
    kept = sum(1 for r in p.rows if r.status == "keep")
    missing = sum(1 for r in p.rows if not r.found)
    notes = [f"{missing} discarded commit(s) are no longer in the repository (expected of a published run): "
             "their rows are imported without their code"] if missing else []
    if p.after_tip:
        notes.append(f"{p.branch} ends {p.after_tip} commit(s) after its last kept one ({p.tip[:7]}), which "
                     "results.tsv does not keep: the tag continues from the last kept commit")
    print(f"import: {len(p.rows)} experiments ({kept} kept) from {p.branch}"
          + (f" ({p.hardware})" if p.hardware else "") + f" into tag {p.tag} ({run})")
    for note in notes:
        print(f"import: {note}")
    print(f"import: its baseline will be this project's train.py ({p.base_from[:7]}); the imported tip's train.py "
          f"its first experiment, judged here like any proposal\n"
          f"continue it: uv run agent/loop.py --repo {shlex.quote(str(p.repo))} --tag {p.tag} --resume")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
