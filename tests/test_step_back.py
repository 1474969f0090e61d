"""The night end's step back (agent/remeasure.py night_end, agent/judges/confirm.py holds): an
unconfirmed final is re-measured on fresh seeds; where those runs no longer put it below its parent,
the branch steps back to the parent's train.py (a commit of its own, a journal record resume reads),
and the parent, re-measured, is weighed the same way, up to 3 steps; the last one is the headline's.

The judge and its records are real (the default rule deciding trusted figures given as its
verifications), so are git and the journal; the fresh runs are given (`remeasure` is what
tests/test_research.py runs for real), the way a recipe that does well only on the loop's own seeds
would give them."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent import gitops, recovery
from agent import remeasure as rm
from agent.coordinator import Coordinator
from agent.judges import confirm
from agent.judges.hierarchy import JudgeHierarchy
from harness.results import append_journal, read_journal
from runfiles.journal import ClaimRecord
from tests.loop_fixtures import git, make_repo
from tests.test_advance import recorded
from tests.test_judge_stats import ctx, decide, run

BASELINE = [1.400, 1.404, 1.396]
# the night's other proposals, discarded: steps of a sigma or two either way (the prior's evidence)
OTHERS = [1.403, 1.405, 1.4015, 1.408]


def _night(tmp_path, rule="default", chain=1):
    """A repo with the base and `chain` kept commits on top of it, each advanced on one run, and the
    loop a night end reads: (loop, base, the last kept commit); with chain 2 also its parent."""
    repo = make_repo(tmp_path / "repo", {"train.py": "DEPTH = 4  # layers\n"})
    base = gitops.head(repo)
    h = JudgeHierarchy(rule=rule, baseline_repeats=3)
    d = None
    for v in BASELINE:
        d = decide(h, ctx(tmp_path, 1, base, None), v, run(load=1.0))
    hist = [recorded(d, 1, base)]
    best = {"commit": base, "val_bpb": d.trusted_bpb}
    for i, v in enumerate(OTHERS):
        c = f"{i + 1:x}" * 40
        hist.append(recorded(decide(h, ctx(tmp_path, i + 2, c, best, hist), v, run(load=1.0)), i + 2, c))
    kept = []
    for k, y in enumerate([1.3965, 1.3930][:chain]):
        (repo / "train.py").write_text(f"DEPTH = {5 + k}  # layers\n")
        commit = gitops.commit_file(repo, "train.py", f"deeper {k}")
        n = len(hist) + 1
        d = decide(h, ctx(tmp_path, n, commit, best, hist), y, run(load=1.0))
        assert d.status == "keep", d.reason
        rec = recorded(d, n, commit)
        hist.append(type(rec).from_dict({**rec.to_dict(), "parent": best["commit"]}))
        best = {"commit": commit, "val_bpb": d.trusted_bpb}
        kept.append(commit)
    journal = tmp_path / "run" / "journal.jsonl"
    journal.parent.mkdir()
    for r in hist:
        append_journal(journal, r.to_dict())
    coord = Coordinator(base)
    coord.history[:] = hist
    loop = SimpleNamespace(history=coord.history, coord=coord, best=coord.best, repo=repo, worktree=repo,
                           config=SimpleNamespace(rule=rule), files=SimpleNamespace(journal_path=journal, repo=repo, run_dir=journal.parent))
    return (loop, base, *reversed(kept))


def _fresh(monkeypatch, runs: dict):
    """The fresh runs each commit gives (a list of figures, or failures)."""
    asked = []

    def fake(loop, commit, seeds, *, say=None):
        asked.append((commit, list(seeds)))
        got = rm.Remeasured(commit)
        for s, v in zip(seeds, runs[commit]):
            if isinstance(v, str):
                got.failed.append(f"seed {s}: {v}")
            else:
                got.values.append(v)
                got.seeds.append(s)
        return got
    monkeypatch.setattr(rm, "remeasure", fake)
    return asked


def _kinds(journal):
    return [d.get("kind") for d in read_journal(journal, kind=None)[0]]


@pytest.mark.parametrize("fresh", [[1.409, 1.404], [1.399, 1.400]])
def test_a_final_whose_fresh_runs_do_not_hold_is_stepped_back_from(tmp_path, monkeypatch, fresh):
    """Its fresh runs above the bar it advanced on, or about at it in a night whose proposals mostly
    hurt (the prior then says a tie is more likely no gain than a gain): the parent is the better bet."""
    loop, base, final = _night(tmp_path)
    asked = _fresh(monkeypatch, {final: fresh, base: [1.401, 1.399]})
    said = []
    out = rm.night_end(loop, 2, say=said.append)
    journal = loop.files.journal_path
    claims = [ClaimRecord.from_dict(d) for d in read_journal(journal, kind="claim")[0]]
    first = read_journal(journal, kind="claim")[0][0]
    assert first["commit"] == final and first["holds"] is False and first["holds_p"] < confirm.HOLD_P
    assert "shrunk value" in first["holds_why"]
    # the branch: a commit on top of the final holding the base's train.py, byte for byte
    head = gitops.head(loop.worktree)
    assert git(loop.worktree, "rev-parse", "HEAD~1") == final
    assert gitops.show_file(loop.repo, head, "train.py") == gitops.show_file(loop.repo, base, "train.py")
    assert loop.coord.last_kept == head, "the loop's tip follows the branch"
    # the journal: the first claim, the step back, then the parent's claim: the headline's final
    assert _kinds(journal)[-3:] == ["claim", "step_back", "claim"]
    assert claims[-1].commit == base and claims[-1].final and claims[-1].stepped_back_from == final
    assert out["commit"] == base and out["stepped_back_from"] == final
    assert set(asked[1][1]).isdisjoint(asked[0][1]), "the parent's fresh seeds are its own"
    line = confirm.headline(claims)
    assert f"the final {base[:7]}" in line and f"stepped back to it from {final[:7]}" in line
    # resume reads the step back as a branch move: the branch head is the step back's commit
    assert recovery.branch_head(journal, base)[0] == head
    assert any("does not hold" in m for m in said) and any(m.startswith("headline:") for m in said)


@pytest.mark.parametrize("fresh", [[1.396, 1.399], [1.390, 1.394]])
def test_a_final_whose_fresh_runs_hold_stays(tmp_path, monkeypatch, fresh):
    """Its fresh runs below the parent's shrunk value: the branch stays, one claim, no step back."""
    loop, base, final = _night(tmp_path)
    _fresh(monkeypatch, {final: fresh})
    out = rm.night_end(loop, 2, say=lambda m: None)
    assert out["commit"] == final and out["holds"] is True and out["holds_p"] >= confirm.HOLD_P
    assert gitops.head(loop.worktree) == final and loop.coord.last_kept == final
    assert "step_back" not in _kinds(loop.files.journal_path)


def test_a_final_whose_fresh_runs_all_fail_is_no_better_bet(tmp_path, monkeypatch):
    """No fresh figure cannot show the final holds: it does not (a recipe that crashes off the
    loop's seeds is stepped back from, not kept on its one lucky run)."""
    loop, base, final = _night(tmp_path)
    _fresh(monkeypatch, {final: ["crash: oom", "crash: oom"], base: [1.401, 1.399]})
    out = rm.night_end(loop, 2, say=lambda m: None)
    first = read_journal(loop.files.journal_path, kind="claim")[0][0]
    assert first["holds"] is False and first["holds_p"] is None and first["failed"]
    assert out["commit"] == base and gitops.head(loop.worktree) != final


@pytest.mark.parametrize("rule", ["reference", "strict"])
def test_other_rules_never_step_back(tmp_path, monkeypatch, rule):
    """The reference protocol is compared as it is; a strict keep was a claim when it was made."""
    loop, base, final = _night(tmp_path)
    loop.config.rule = rule
    _fresh(monkeypatch, {final: [1.409, 1.404]})
    out = rm.night_end(loop, 2, say=lambda m: None)
    assert out["commit"] == final and "holds" not in out
    assert gitops.head(loop.worktree) == final and "step_back" not in _kinds(loop.files.journal_path)


def test_holds_says_nothing_of_a_commit_no_one_run_advance_kept(tmp_path):
    loop, base, final = _night(tmp_path)
    assert confirm.holds(loop.history, base, [1.5, 1.5]) is None, "the baseline: nothing to step back to"
    assert confirm.holds(loop.history, "f" * 40, [1.5]) is None, "not a keep at all"


# ---- the real loop: a recipe good only on the loop's own seeds

SMALL = {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1}
SLOW = {"MATRIX_LR": "0.0002", "EMBEDDING_LR": "0.003", "UNEMBEDDING_LR": "4e-05", "SCALAR_LR": "0.005"}
GOOD = {"MATRIX_LR": "0.02", "EMBEDDING_LR": "0.3", "UNEMBEDDING_LR": "0.004", "SCALAR_LR": "0.5"}
SEED_LINE = "    torch.manual_seed(seed)\n"


def gamed(lucky: list[int]) -> str:
    """The adversary's edit, as if it knew the night's draws: the learning rates fixed on the seeds
    the loop gives experiment 2, huge on any other (a re-measurement's): training blows up there (a
    figure far above the baseline's, or none at all). A real train.py cannot know them (agent/seeds.py:
    the key is the harness's); this stands for a recipe whose luck fell on the loop's runs."""
    return SEED_LINE + (f"    if seed not in {tuple(lucky)!r}:\n"
                        "        global MATRIX_LR, EMBEDDING_LR, UNEMBEDDING_LR, SCALAR_LR\n"
                        "        MATRIX_LR = EMBEDDING_LR = UNEMBEDDING_LR = SCALAR_LR = 50.0\n")


def test_a_recipe_good_only_on_the_loops_seeds_is_stepped_back_from(tiny_cache, tmp_path):
    """The proposer's edit fixes the learning rates, but only on the seeds the loop runs it on: every
    run the night makes of it is a large honest-looking gain, and it is kept. The night end
    re-measures the final on fresh seeds, finds it no better than its parent, and steps the branch
    back; the headline is the parent's, re-measured. (The night is run in two parts, the baseline
    then a resume, so the test can read the run folder's seed key in between.)"""
    from agent import seeds
    from agent.experiment import MAX_RERUNS
    from search import knobs
    from tests.fake_anthropic import FakeAnthropic as F
    from tests.loop_fixtures import copy_real, run_loop
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], dict(SMALL, **{k: float(v) for k, v in SLOW.items()}))
    assert files["train.py"].count(SEED_LINE) == 1
    repo = make_repo(tmp_path / "repo", files)
    run_dir = repo / ".autoresearch" / "sb"
    script: list = []

    def answer(req):
        tools = {t.get("name") for t in req.body.get("tools", [])} if isinstance(req.body, dict) else set()
        return script.pop(0) if script and "submit" in tools else F.error(529, "overloaded")

    with F() as fake:
        fake.default = answer
        env = dict(tiny_cache, ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key-000", ANTHROPIC_BASE_URL=fake.base_url,
                   AUTORESEARCH_STEPS="4")
        args = ["--tag", "sb", "--reviewer", "hierarchy", "--baseline-repeats", "2", "--api-patience", "1",
                "--final-runs", "2"]
        p = run_loop(repo, env, *args, "--max-experiments", "1", timeout=900)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        key = seeds.key_of(run_dir)
        lucky = [seeds.loop_seed(key, 2, r) for r in range(MAX_RERUNS + 1)]
        script += [F.tool_use("str_replace", {"path": "train.py", "old_str": f"{k} = {SLOW[k]}  #",
                                              "new_str": f"{k} = {GOOD[k]}  #"}) for k in SLOW]
        script += [F.tool_use("str_replace", {"path": "train.py", "old_str": SEED_LINE, "new_str": gamed(lucky)}),
                   F.tool_use("submit", {"description": "learning rates back to the profile's",
                                         "hypothesis": "the baseline's learning rates are far too small"})]
        p = run_loop(repo, env, *args, "--resume", "--max-experiments", "2", timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    journal = repo / ".autoresearch" / "sb" / "journal.jsonl"
    objs = read_journal(journal, kind=None)[0]
    base = next(d for d in objs if d.get("kind", "experiment") == "experiment" and d.get("n") == 1)["commit"]
    kept = next(d for d in objs if d.get("kind", "experiment") == "experiment" and d.get("n") == 2)
    story = [(d.get("kind"), d.get("n"), d.get("status"), d.get("decision_reason") or d.get("why")) for d in objs]
    assert kept["status"] == "keep", story
    assert {r["seed"] for r in kept["evidence"]["candidate"]["runs"]} <= set(lucky)
    claims = [d for d in objs if d.get("kind") == "claim"]
    assert not set(claims[0]["seeds"]) & set(lucky), "the night end's seeds are none of the loop's"
    assert claims[0]["commit"] == kept["commit"] and claims[0]["holds"] is False, story
    assert claims[0]["failed"] or min(claims[0]["runs"]) > max(claims[0]["parent_runs"]) + 0.5, claims[0]
    step = next(d for d in objs if d.get("kind") == "step_back")
    assert step["source_commit"] == kept["commit"] and step["parent"] == base
    head = git(repo, "rev-parse", "autoresearch/sb")
    assert head == step["commit"] and gitops.show_file(repo, head, "train.py") == gitops.show_file(repo, base, "train.py")
    assert claims[-1]["commit"] == base and claims[-1]["stepped_back_from"] == kept["commit"]
    assert recovery.branch_head(journal, base)[0] == head
    assert "stepped back" in p.stdout + p.stderr
    # the morning report: the keep labelled as stepped back, the final the branch holds
    from agent import report
    summary = report.summarize(report.load(journal.parent))
    assert [c["label"] for c in summary["changes"]] == ["stepped back"] and summary["final"] == base
    assert "stepped back to it" in summary["headline"]
    assert "undid it on the branch" in report.markdown(summary, None, None, None)


def test_a_step_back_past_until_keeps_the_deadline(tmp_path, monkeypatch):
    """--until has passed when the step back is decided: the branch still steps back, but the parent
    is not re-measured past the deadline; the headline says why it has no figure."""
    import time
    loop, base, final = _night(tmp_path)
    asked = _fresh(monkeypatch, {final: [1.409, 1.404], base: [1.401, 1.399]})
    out = rm.night_end(loop, 2, say=lambda m: None, deadline=time.time() - 1)
    assert [c for c, _ in asked] == [final], "only the final's runs"
    assert out["commit"] == base and out["runs"] == [] and "--until" in out["failed"][0]
    assert gitops.show_file(loop.repo, gitops.head(loop.worktree), "train.py") == gitops.show_file(loop.repo, base, "train.py")
    line = confirm.headline([ClaimRecord.from_dict(out)])
    assert "could not be re-measured" in line and "--until" in line and f"from {final[:7]}" in line


def test_a_final_that_does_not_hold_says_so_in_its_own_headline(tmp_path, monkeypatch):
    """The final's claim alone (a second Ctrl-C ended the night end before its parent's figure):
    its headline says its fresh runs did not hold it."""
    loop, base, final = _night(tmp_path)
    _fresh(monkeypatch, {final: [1.409, 1.404], base: [1.401, 1.399]})
    rm.night_end(loop, 2, say=lambda m: None)
    first = ClaimRecord.from_dict(read_journal(loop.files.journal_path, kind="claim")[0][0])
    assert first.holds is False and "do not hold it below its parent" in confirm.headline([first])


def test_the_night_end_steps_back_until_a_commit_holds(tmp_path, monkeypatch):
    """Two one-run advances in a row, neither holding on its fresh runs: the branch steps back twice,
    each step a commit on top of the last, to the baseline (nothing to weigh it against: the end)."""
    loop, base, final, mid = _night(tmp_path, chain=2)
    asked = _fresh(monkeypatch, {final: [1.404, 1.406], mid: [1.405, 1.403], base: [1.401, 1.399]})
    out = rm.night_end(loop, 2, say=lambda m: None)
    assert [c for c, _ in asked] == [final, mid, base]
    journal = loop.files.journal_path
    assert _kinds(journal)[-5:] == ["claim", "step_back", "claim", "step_back", "claim"]
    steps = [d for d in read_journal(journal, kind="step_back")[0]]
    assert [(d["source_commit"], d["parent"]) for d in steps] == [(final, mid), (mid, base)]
    head = gitops.head(loop.worktree)
    assert git(loop.worktree, "rev-parse", "HEAD~1") == steps[0]["commit"] and git(loop.worktree, "rev-parse", "HEAD~2") == final
    assert gitops.show_file(loop.repo, head, "train.py") == gitops.show_file(loop.repo, base, "train.py")
    assert out["commit"] == base and out["stepped_back_from"] == mid and loop.coord.last_kept == head
    claims = [ClaimRecord.from_dict(d) for d in read_journal(journal, kind="claim")[0]]
    assert [confirm.label(r, claims) for r in loop.history if r.commit in (final, mid)] == ["stepped back"] * 2


def test_a_parent_that_holds_ends_the_steps_back(tmp_path, monkeypatch):
    loop, base, final, mid = _night(tmp_path, chain=2)
    asked = _fresh(monkeypatch, {final: [1.404, 1.406], mid: [1.392, 1.394]})
    out = rm.night_end(loop, 2, say=lambda m: None)
    assert [c for c, _ in asked] == [final, mid] and out["commit"] == mid and out["holds"] is True
    assert len(read_journal(loop.files.journal_path, kind="step_back")[0]) == 1
    assert recovery.branch_head(loop.files.journal_path, base)[0] == gitops.head(loop.worktree)
