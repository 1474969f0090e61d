"""agent/import_run.py on a repository made in the reference's loop shape: a branch of train.py
commits (discards reset away) and its 5-column results.tsv; imported, shown, resumed by the real
loop; bad input refused with nothing changed."""
import json
import subprocess
import sys

import pytest

from agent import report
from agent.import_run import IMPORTED_JSON
from dashboard.app import create_app
from harness import gitops
from harness.records import experiment_records
from harness.results import read_journal, read_results
from tests.dashboard_fixtures import TOKEN
from tests.loop_fixtures import REPO, fake_env, fake_repo, git, run_loop

DESC_TAB = "depth 5\twith a tab, \"quotes\" and unicode: ünï"


def _edit(repo, old, new, message):
    path = repo / "train.py"
    path.write_text(path.read_text().replace(old, new))
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "--short", "HEAD")


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
    results.write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n" + "".join("\t".join(r) + "\n" for r in rows))
    return repo, results, rows


def _state(repo):
    """Everything an import could change in the repository."""
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)"), git(repo, "worktree", "list")


def _import(*args):
    return subprocess.run([sys.executable, str(REPO / "agent" / "import_run.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_import_then_show_then_resume(tmp_path):
    repo, results, rows = reference_run(tmp_path)
    tip = git(repo, "rev-parse", "autoresearch/mar5")
    p = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "imp")
    assert p.returncode == 0, p.stderr
    assert "5 experiments (3 kept)" in p.stdout and "--resume" in p.stdout
    run = repo / ".autoresearch" / "imp"
    recs = experiment_records(read_journal(run / "journal.jsonl")[0])
    assert [r.status for r in recs] == [r[3] for r in rows]
    assert all(r.ident.imported and r.proposer == "imported" and not r.run.sealed and r.decision.trusted_bpb is None for r in recs)
    assert recs[1].description == DESC_TAB and "DEPTH = 5" in recs[1].proposal.diff
    assert recs[0].commit == git(repo, "rev-parse", "master"), "the word 'baseline' is the first change's parent"
    assert recs[4].commit == tip and recs[4].parent == recs[1].commit
    assert recs[3].run.crash_class and recs[3].run.summary is None
    table = read_results(run / "results.tsv")
    assert not table.problems and [ln.commit for ln in table.rows] == [r.commit[:7] for r in recs]
    assert table.rows[1].description == DESC_TAB.replace("\t", " ")
    for n in (3, 4):   # the discarded commits stay reachable
        assert git(repo, "rev-parse", f"refs/autoresearch/imp/discarded/{n}") == recs[n - 1].commit
    assert git(repo, "rev-parse", "autoresearch/mar5") == tip, "the imported branch is left as it was"
    assert git(repo, "rev-parse", "autoresearch/imp~1") == tip
    assert (run / IMPORTED_JSON).exists()

    got = report.report(run)   # the report shows the imported run
    assert [c["n"] for c in got["summary"]["changes"]] == [2, 5]
    assert "depth 6" in (run / "report" / "report.md").read_text()
    page = create_app(repo=repo, token=TOKEN).test_client().get("/t/imp/").get_data(as_text=True)
    assert "width 0 (division by zero)" in page and "depth 6" in page

    env = fake_env(tmp_path)
    p = run_loop(repo, env, "--tag", "imp", "--resume", "--budget", "1", "--max-experiments", "7")
    assert p.returncode == 0, p.stdout + p.stderr
    recs = experiment_records(read_journal(run / "journal.jsonl")[0])
    assert [r.n for r in recs] == [1, 2, 3, 4, 5, 6, 7]
    own = recs[5:]
    assert own[0].is_baseline and not own[0].ident.imported, "the resumed loop measures its own baseline first"
    assert own[0].commit != tip and git(repo, "merge-base", tip, own[0].commit) == tip, \
        "measured on the tag's base: the imported best's train.py, committed on top of the imported tip"
    assert gitops.show_file(repo, own[0].commit, "train.py") == gitops.show_file(repo, tip, "train.py")
    assert own[1].parent == own[0].commit and not own[1].ident.imported
    assert len(read_results(run / "results.tsv").rows) == 7
    assert git(repo, "rev-parse", "autoresearch/mar5") == tip


@pytest.mark.parametrize("case", ["missing_commit", "torn_row", "other_format", "tip_ahead", "word_later"])
def test_bad_input_is_refused_and_changes_nothing(tmp_path, case):
    repo, results, rows = reference_run(tmp_path, baseline_word=False)
    lines = results.read_text().splitlines(True)
    if case == "missing_commit":
        lines[2] = "deadbee" + lines[2][7:]
        want = "commit deadbee (keep) is not in"
    elif case == "torn_row":
        lines[3] = "\t".join(lines[3].split("\t")[:3]) + "\n"
        want = "torn or malformed row(s)"
    elif case == "other_format":
        lines = [ln.replace("\t", ",") for ln in lines]
        want = "not a results.tsv in the reference's format"
    elif case == "tip_ahead":
        git(repo, "checkout", "-q", "autoresearch/mar5")
        _edit(repo, "USE_BIAS = False", "USE_BIAS = True", "unrecorded")
        git(repo, "checkout", "-q", "master")
        want = "is not the last kept row's commit"
    else:
        lines[3] = "baseline" + lines[3][7:]
        want = "only the first row may name its commit by a word"
    results.write_text("".join(lines))
    before = _state(repo)
    p = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "bad")
    assert p.returncode == 2 and want in p.stderr, p.stderr
    assert _state(repo) == before and not (repo / ".autoresearch" / "bad").exists()


def test_discards_whose_commits_are_gone_need_allow_missing(tmp_path):
    repo, results, rows = reference_run(tmp_path)
    lines = results.read_text().splitlines(True)
    lines[3] = "abcdef1" + lines[3][7:]   # a discarded commit garbage-collected away
    results.write_text("".join(lines))
    p = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "m")
    assert p.returncode == 2 and "--allow-missing" in p.stderr
    p = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "m",
                "--allow-missing")
    assert p.returncode == 0, p.stderr
    recs = experiment_records(read_journal(repo / ".autoresearch" / "m" / "journal.jsonl")[0])
    assert recs[2].commit == "abcdef1" and recs[2].ident.discarded_ref is None and recs[2].proposal.diff == ""


def test_an_existing_tag_is_refused(tmp_path):
    repo, results, _ = reference_run(tmp_path)
    assert _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "x").returncode == 0
    before = _state(repo)
    p = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "x")
    assert p.returncode == 2 and "exists" in p.stderr and _state(repo) == before


def test_a_real_tiny_train_py_imported_and_resumed_under_the_judge(tiny_cache, tmp_path):
    """The real train.py on the tiny profile: the reference-shape branch (two knob edits, one kept),
    imported, then resumed by the loop with the judge hierarchy (sealed runs, trusted evaluation)
    for its first experiment: its own baseline on the imported best, run twice for the noise."""
    from harness import knobs
    from tests.loop_fixtures import copy_real, loop_cmd, make_repo
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4,
                                                            "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1})
    repo = make_repo(tmp_path / "repo", files)
    git(repo, "checkout", "-q", "-b", "autoresearch/mar5")
    base = git(repo, "rev-parse", "--short", "HEAD")
    kept = _edit(repo, "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.4", "warmdown 0.4")
    dropped = _edit(repo, "WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.3", "wd 0.3")
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    git(repo, "checkout", "-q", "master")
    results = repo / "results.tsv"
    results.write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
                       f"{base}\t3.900000\t0.1\tkeep\tbaseline\n{kept}\t3.890000\t0.1\tkeep\twarmdown 0.4\n"
                       f"{dropped}\t3.950000\t0.1\tdiscard\twd 0.3\n")
    p = _import("--repo", repo, "--branch", "autoresearch/mar5", "--results", results, "--tag", "real")
    assert p.returncode == 0, p.stderr
    env = dict(tiny_cache, AUTORESEARCH_STEPS="4")   # steps mode: a busy shared machine disturbs no run
    env.pop("ANTHROPIC_API_KEY", None)
    p = subprocess.run(loop_cmd("--tag", "real", "--resume", "--budget", "2", "--reviewer", "hierarchy",
                                "--baseline-repeats", "2", "--max-experiments", "4"),
                       cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    run = repo / ".autoresearch" / "real"
    recs = experiment_records(read_journal(run / "journal.jsonl")[0])
    assert [r.n for r in recs] == [1, 2, 3, 4] and all(r.ident.imported for r in recs[:3])
    own = recs[3]
    assert own.is_baseline and own.run.sealed and own.decision.trusted_bpb is not None and not own.ident.imported
    assert len(own.noise_band().values) == 2, "the judge measured its noise on this machine"
    tip = git(repo, "rev-parse", "autoresearch/mar5")
    assert git(repo, "merge-base", tip, own.commit) == tip and own.commit != tip
    assert "WARMDOWN_RATIO = 0.4" in gitops.show_file(repo, own.commit, "train.py")
    info = json.loads((run / "run.json").read_text())
    assert info["base_commit"] == own.commit and info["profile"] == "tiny" and info["sandbox"]["kind"] == "bwrap"
    report.report(run)
    md = (run / "report" / "report.md").read_text()
    assert "1 experiments; baseline" in md and "- imported: experiments 1-3 are imported" in md
