"""agent/import_run.py on repositories made in the reference's loop shape: a branch of train.py
commits and its 5-column results.tsv, as a loop leaves it (discards reset away) or as the reference
publishes it (exp/<hardware>/<tag>: the first row named `baseline`, discarded commits gone from the
repository, the branch ending past its last keep). Imported, shown, resumed by the real loop, whose
baseline is the project's own train.py and whose first experiment is the imported tip; bad input
refused with nothing changed."""
import hashlib
import json
import shlex
import subprocess
import sys

import pytest

from agent import recovery, summary
from agent.import_run import IMPORTED_JSON, TIP_PROPOSER
from agent.workspace import RunFiles
from dashboard.app import create_app
from agent import gitops
from harness.experiment_record import experiment_records
from harness.results import read_journal, read_results
from runfiles.shared_results import ImportedInfo
from tests.dashboard_fixtures import TOKEN
from tests.loop_fixtures import REPO, fake_env, fake_repo, git, run_loop

DESC_TAB = "depth 5\twith a tab, \"quotes\" and unicode: ünï"
PUBLISHED = "exp/H100/mar8"


def _edit(repo, old, new, message):
    path = repo / "train.py"
    path.write_text(path.read_text().replace(old, new))
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def _write(results, rows):
    results.write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n" + "".join("\t".join(r) + "\n" for r in rows))


def reference_run(tmp, *, baseline_word=True):
    """The reference's loop, by hand: branch autoresearch/mar5, a baseline, then edits of train.py
    committed, kept (advance) or discarded/crashed (git reset --hard HEAD~1); results.tsv untracked."""
    repo = fake_repo(tmp / "repo")
    git(repo, "checkout", "-q", "-b", "autoresearch/mar5")
    base = git(repo, "rev-parse", "--short", "HEAD")
    rows = [("baseline" if baseline_word else base, "1.020000", "0.1", "keep", "baseline")]
    c = _edit(repo, "DEPTH = 4", "DEPTH = 5", "depth 5")
    rows.append((c, "1.010000", "0.1", "keep", DESC_TAB))
    c = _edit(repo, "LR = 0.04", "LR = 0.08", "lr 0.08")
    rows.append((c, "1.060000", "0.1", "discard", "lr 0.08"))
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    c = _edit(repo, "WIDTH = 64", "WIDTH = 0", "width 0")
    rows.append((c, "0.000000", "0.0", "crash", "width 0 (division by zero)"))
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    c = _edit(repo, "DEPTH = 5", "DEPTH = 6", "depth 6")
    rows.append((c, "1.000000", "0.1", "keep", "depth 6"))
    git(repo, "checkout", "-q", "master")
    results = repo / "results.tsv"
    _write(results, rows)
    return repo, results, rows


def _gone(repo, seed):
    """A commit name this repository never had, as a published run's discarded rows name them."""
    name = hashlib.sha1(f"gone {seed}".encode()).hexdigest()[:7]
    assert gitops.rev_parse(repo, name) is None
    return name


def published_run(tmp, branch=PUBLISHED):
    """A run as the reference publishes one: the first row named `baseline`, kept edits as commits,
    discarded and crashed ones reset away and absent from the repository, and the branch ending past
    its last keep: a discarded edit that was not reset, then a commit of results.tsv on top of it.
    Returns the repository, the results.tsv (outside the repository), the rows and the last keep."""
    repo = fake_repo(tmp / "repo")
    git(repo, "checkout", "-q", "-b", branch)
    rows = [("baseline", "1.020000", "0.1", "keep", "baseline"),
            (_gone(repo, 1), "1.030000", "0.1", "discard", "lr 0.03")]
    rows.append((_edit(repo, "DEPTH = 4", "DEPTH = 5", "depth 5"), "1.010000", "0.1", "keep", "depth 5"))
    rows += [(_gone(repo, 2), "0.000000", "0.0", "crash", "width 0"),
             (_gone(repo, 3), "1.050000", "0.1", "discard", "bias on")]
    last = _edit(repo, "DEPTH = 5", "DEPTH = 6", "depth 6")
    rows.append((last, "1.000000", "0.1", "keep", "depth 6"))
    rows.append((_edit(repo, "LR = 0.04", "LR = 0.08", "lr 0.08"), "1.060000", "0.1", "discard", "lr 0.08"))
    results = tmp / "results.tsv"
    _write(results, rows)
    (repo / "results.tsv").write_text(results.read_text())
    git(repo, "add", "results.tsv")
    git(repo, "commit", "-q", "-m", "add experiment results log")
    git(repo, "checkout", "-q", "master")
    return repo, results, rows, git(repo, "rev-parse", last)


def _state(repo):
    """Everything an import could change in the repository."""
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)"), git(repo, "worktree", "list")


def _import(*args):
    return subprocess.run([sys.executable, str(REPO / "agent" / "import_run.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def _records(run):
    return experiment_records(read_journal(run / "journal.jsonl")[0])


def test_import_then_show_then_resume(tmp_path):
    repo, results, rows = reference_run(tmp_path)
    tip = git(repo, "rev-parse", "autoresearch/mar5")
    p = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "imp")
    assert p.returncode == 0, p.stderr
    assert "5 experiments (3 kept)" in p.stdout and "--resume" in p.stdout
    run = repo / ".autoresearch" / "imp"
    recs = _records(run)
    assert [r.status for r in recs] == [r[3] for r in rows]
    assert all(r.imported and r.proposer == "imported" and not r.sealed and r.trusted_bpb is None for r in recs)
    assert recs[1].description == DESC_TAB and "DEPTH = 5" in recs[1].diff
    assert recs[0].commit == git(repo, "rev-parse", "master"), "the word 'baseline' is the first change's parent"
    assert recs[4].commit == tip and recs[4].parent == recs[1].commit
    assert recs[3].crash_class and recs[3].summary is None
    table = read_results(run / "results.tsv")
    assert not table.problems and [ln.commit for ln in table.rows] == [r.commit[:7] for r in recs]
    assert table.rows[1].description == DESC_TAB.replace("\t", " ")
    for n in (3, 4):   # the discarded commits stay reachable
        assert git(repo, "rev-parse", f"refs/autoresearch/imp/discarded/{n}") == recs[n - 1].commit
    assert git(repo, "rev-parse", "autoresearch/mar5") == tip, "the imported branch is left as it was"
    assert git(repo, "rev-parse", "autoresearch/imp~1") == tip, "the tag's base sits on the imported tip"
    base = git(repo, "rev-parse", "autoresearch/imp")
    assert git(repo, "rev-parse", f"{base}^{{tree}}") == git(repo, "rev-parse", "master^{tree}"), \
        "the base holds this project's own files (--base, default HEAD)"
    info = ImportedInfo.read(run)
    assert info.base == base and info.tip == tip and info.hardware is None, "no hardware in autoresearch/mar5"
    page = create_app(repo=repo, token=TOKEN).test_client().get("/t/imp/").get_data(as_text=True)
    assert "width 0 (division by zero)" in page and "depth 6" in page

    env = fake_env(tmp_path)
    p = run_loop(repo, env, "--tag", "imp", "--resume", "--budget", "1", "--max-experiments", "8")
    assert p.returncode == 0, p.stdout + p.stderr
    recs = _records(run)
    assert [r.n for r in recs] == [1, 2, 3, 4, 5, 6, 7, 8]
    baseline, candidate, later = recs[5:]
    assert baseline.is_baseline and not baseline.imported and baseline.commit == base
    assert gitops.show_file(repo, baseline.commit, "train.py") == gitops.show_file(repo, "master", "train.py"), \
        "the baseline is this project's own train.py, not the imported code"
    assert candidate.proposer == TIP_PROPOSER and not candidate.imported and not candidate.is_baseline
    assert candidate.description == "imported tip of autoresearch/mar5" and candidate.parent == base
    assert gitops.show_file(repo, candidate.commit, "train.py") == gitops.show_file(repo, tip, "train.py")
    assert candidate.status == "keep", "depth 6 measured here beats the project's depth 4"
    assert later.parent == candidate.commit and later.proposer not in (TIP_PROPOSER, "imported")
    assert len(read_results(run / "results.tsv").rows) == 8
    assert git(repo, "rev-parse", "autoresearch/mar5") == tip

    p = run_loop(repo, env, "--tag", "imp", "--resume", "--max-experiments", "9")   # once only
    assert p.returncode == 0, p.stdout + p.stderr
    assert [r.proposer for r in _records(run)].count(TIP_PROPOSER) == 1


def test_a_branch_published_like_the_reference_s_imports_and_resumes(tmp_path):
    """The tip a discard, then a results.tsv commit; the discarded commits missing; the first row
    named `baseline`. Imported with no option: the tag continues from the last kept row's commit,
    the missing commits are counted, the hardware is read from the branch name."""
    repo, results, rows, last = published_run(tmp_path)
    published_tip = git(repo, "rev-parse", PUBLISHED)
    before = gitops.show_file(repo, published_tip, "train.py")
    p = _import("--repo", repo, "--branch", PUBLISHED, "--results", results, "--tag", "mar8-here")
    assert p.returncode == 0, p.stderr
    assert "7 experiments (3 kept) from exp/H100/mar8 (H100)" in p.stdout
    assert "3 discarded commit(s) are no longer in the repository" in p.stdout
    assert "ends 2 commit(s) after its last kept one" in p.stdout
    run = repo / ".autoresearch" / "mar8-here"
    info = ImportedInfo.read(run)
    assert info.hardware == "H100" and json.loads((run / IMPORTED_JSON).read_text())["hardware"] == "H100"
    assert info.tip == last and len(info.missing_commits) == 3 and info.rows == 7
    assert git(repo, "rev-parse", "autoresearch/mar8-here~1") == last
    recs = _records(run)
    assert [r.status for r in recs] == [r[3] for r in rows] and recs[0].commit == git(repo, "rev-parse", "master")
    gone = [r for r in recs if r.commit in info.missing_commits]
    assert len(gone) == 3 and all(r.discarded_ref is None and r.diff == "" for r in gone)
    assert gitops.ref_exists(repo, "refs/autoresearch/mar8-here/discarded/7"), "the published tip's discard stays reachable"

    p = run_loop(repo, fake_env(tmp_path), "--tag", "mar8-here", "--resume", "--budget", "1", "--max-experiments", "9")
    assert p.returncode == 0, p.stdout + p.stderr
    baseline, candidate = _records(run)[7:]
    assert baseline.is_baseline and gitops.show_file(repo, baseline.commit, "train.py") == \
        gitops.show_file(repo, "master", "train.py")
    assert candidate.proposer == TIP_PROPOSER and candidate.description == "imported tip of exp/H100/mar8 from H100"
    ran = gitops.show_file(repo, candidate.commit, "train.py")
    assert ran == gitops.show_file(repo, last, "train.py") and ran != before, \
        "the candidate is the last kept commit's train.py, not the published tip's discard"
    assert git(repo, "rev-parse", PUBLISHED) == published_tip


def test_the_hardware_comes_from_an_option_or_stays_unknown(tmp_path):
    repo, results, rows, _ = published_run(tmp_path, branch="exp/H100/mar8")
    git(repo, "branch", "plain", PUBLISHED)
    for tag, args, want in (("opt", ["--hardware", "A100 80GB\x1b[31m\u202e"], "A100 80GB31m"),
                            ("plain", [], None), ("remote", [], "H100")):
        branch = {"opt": PUBLISHED, "plain": "plain", "remote": "origin/exp/H100/mar8"}[tag]
        if tag == "remote":   # a remote's branch, fetched but never checked out
            git(repo, "update-ref", "refs/remotes/origin/exp/H100/mar8", PUBLISHED)
        p = _import("--repo", repo, "--branch", branch, "--results", results, "--tag", tag, *args)
        assert p.returncode == 0, p.stderr
        info = ImportedInfo.read(repo / ".autoresearch" / tag)
        assert info.hardware == want, (tag, info.hardware)
        assert ("hardware" in json.loads((repo / ".autoresearch" / tag / IMPORTED_JSON).read_text())) == (want is not None)


def test_imported_figures_are_never_the_best(tmp_path):
    """The imported rows claim 0.100000: history of another machine. The end summary, the loop's
    console and state.json show the tag's own best; the imported tip, re-measured here, may be it."""
    repo, results, rows = reference_run(tmp_path)
    _write(results, [(c, "0.100000" if s == "keep" else b, m, s, d) for c, b, m, s, d in rows])
    assert _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "f").returncode == 0
    run = repo / ".autoresearch" / "f"
    p = run_loop(repo, fake_env(tmp_path), "--tag", "f", "--resume", "--budget", "1", "--max-experiments", "6")
    assert p.returncode == 0, p.stdout + p.stderr
    end = p.stdout[p.stdout.index("== autoresearch f: stopped"):]
    best_line = next(ln for ln in end.splitlines() if ln.startswith("best val_bpb"))
    assert "0.100000" not in best_line and "1.020000" in best_line and "(exp 6: baseline" in best_line
    assert "imported      5 experiments from autoresearch/mar5, 3 kept; their best, 0.100000, is the original " \
           "machine's figure: history, not measured here" in end
    assert "experiments   1: 1 kept, 0 discarded, 0 crashed (this tag's own)" in end
    state = json.loads((run / "state.json").read_text())
    assert state["best"]["val_bpb"] == pytest.approx(1.02)
    s = summary.build(run, "f", "done", 1.0)
    assert s.best["n"] == 6 and s.baseline == pytest.approx(1.02)
    base = git(repo, "rev-parse", "autoresearch/f")
    found = recovery.reconcile(RunFiles(repo, "f", run, run), base)   # what the next --resume starts from
    assert found.last_kept == base and found.best["val_bpb"] == pytest.approx(1.02), found.best

    p = run_loop(repo, fake_env(tmp_path), "--tag", "f", "--resume", "--max-experiments", "7")
    assert p.returncode == 0, p.stdout + p.stderr
    s = summary.build(run, "f", "done", 1.0)
    assert s.best["n"] == 7 and s.best["val_bpb"] == pytest.approx(1.0), "the imported tip, measured here"
    assert "(-0.020000 vs the first kept 1.020000)" in summary.render(s)


# The refusals: (case, what the message says, whether the command it names is an import command
# that then succeeds as named).
REFUSALS = [("tag_exists", "pick another tag", True), ("bad_tag", "--tag", True),
            ("branch_by_its_last_name", "looks like it", True), ("no_branch", "fetch it first", False),
            ("base_holds_imported_code", "never imported code", True),
            ("results_of_another_branch", "is not on side", True),
            ("missing_keep", "fetch the run's full branch", False), ("torn_row", "fix: correct or delete", False),
            ("other_format", "fix: its first line", False), ("word_later", "fix: write that row", False),
            ("no_keep", "fix: its first row", False), ("not_a_repo", "not a git repository", False)]


@pytest.mark.parametrize("case,want,runnable", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_every_refusal_names_the_command_that_would_succeed(tmp_path, case, want, runnable):
    repo, results, rows = reference_run(tmp_path, baseline_word=False)
    branch, tag, lines = "autoresearch/mar5", "bad", results.read_text().splitlines(True)
    where = repo
    if case == "tag_exists":
        tag = "x"
        assert _import("--repo", repo, "--branch", branch, "--results", results, "--tag", "x").returncode == 0
    elif case == "bad_tag":
        tag = "no spaces"
    elif case == "branch_by_its_last_name":
        branch = "mar5"
    elif case == "no_branch":
        branch = "exp/H100/mar9"
    elif case == "base_holds_imported_code":
        git(repo, "checkout", "-q", "autoresearch/mar5")   # the checkout is the imported run's own branch
    elif case == "results_of_another_branch":
        git(repo, "branch", "side", "master")   # a branch without the kept commits
        branch = "side"
    elif case == "missing_keep":
        lines[2] = "deadbee" + lines[2][7:]
    elif case == "torn_row":
        lines[3] = "\t".join(lines[3].split("\t")[:3]) + "\n"
    elif case == "other_format":
        lines = [ln.replace("\t", ",") for ln in lines]
    elif case == "word_later":
        lines[3] = "baseline" + lines[3][7:]
    elif case == "no_keep":
        lines = [ln.replace("\tkeep\t", "\tdiscard\t") for ln in lines]
    elif case == "not_a_repo":
        where = tmp_path / "elsewhere"
        where.mkdir()
    results.write_text("".join(lines))
    before, existed = _state(repo), (repo / ".autoresearch" / tag).exists()
    p = _import("--repo", where, "--branch", branch, "--results", results, "--tag", tag)
    assert p.returncode == 2 and want in p.stderr, p.stderr
    assert _state(repo) == before and (repo / ".autoresearch" / tag).exists() == existed
    message = p.stderr.strip()
    assert "uv run agent/import_run.py" in message or "git -C" in message or "fix:" in message, message
    if runnable:   # the command named is one that succeeds, as it is written
        named = message[message.index("uv run agent/import_run.py"):].split(" (the branch")[0]
        words = shlex.split(named)[3:]
        again = _import(*words)
        assert again.returncode == 0, (named, again.stderr)


def test_an_import_made_before_the_base_existed_is_refused_on_resume(tmp_path):
    """A tag imported by an earlier version has no base of the project's own: resuming it would
    measure the imported code as the baseline. The loop refuses and says how to import it again."""
    repo, results, _ = reference_run(tmp_path)
    assert _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "old").returncode == 0
    run = repo / ".autoresearch" / "old"
    info = json.loads((run / IMPORTED_JSON).read_text())
    del info["base"]
    (run / IMPORTED_JSON).write_text(json.dumps(info))
    p = run_loop(repo, fake_env(tmp_path), "--tag", "old", "--resume", "--budget", "1", "--max-experiments", "6")
    assert p.returncode == 2 and "import it again into a new tag: uv run agent/import_run.py" in p.stderr, p.stderr
    assert len(_records(run)) == 5 and not (run / "run.json").exists()
    named = p.stderr[p.stderr.index("uv run agent/import_run.py"):].split(", then --resume")[0]
    assert _import(*shlex.split(named.replace("--tag NEW", "--tag again"))[3:]).returncode == 0, named
