"""The first hour of a new user, with real parts: the --smoke preset on the real train.py (tiny
profile, sealed runs, the trusted evaluation, the judge hierarchy), then `--resume` alone; a data
shard deleted while the loop runs; two loops started at once on one new tag; a wrong tag."""
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import cli
from agent.cli import SMOKE_DEFAULTS
from search import knobs
from harness.results import read_journal, read_results
from tests.loop_fixtures import (REPO, copy_real, fake_env, fake_repo, git, loop_cmd, make_repo,
                                 run_loop, spied_loop_cmd)
from tests.test_loop import check_run
from agent.coordinator import undecided


# The project's top-level packages and modules (what "the project's modules" counts).
PROJECT_PACKAGES = ("agent", "harness", "dashboard", "executors", "llm", "search", "runfiles", "lab",
                    "inference", "scripts", "prepare", "runtime", "attention", "graph_export", "train")


# The project's modules a --smoke night loads today (a ceiling: more fails). The loop, the judges
# (13 modules), harness/ (15) and the morning report with its chart (8) are most of them.
SMOKE_MODULES_MAX = 72


def _own_cache(tiny_cache, tmp: Path) -> dict:
    """A copy of the session's tiny cache (never modified) and the environment that uses it."""
    cache = tmp / "cache"
    shutil.copytree(tiny_cache["AUTORESEARCH_CACHE"], cache)
    env = dict(tiny_cache, AUTORESEARCH_CACHE=str(cache))
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def _bare(*args) -> list[str]:
    """The loop's command line exactly as a user types it (loop_cmd adds test defaults)."""
    return [sys.executable, str(REPO / "agent" / "loop.py"), *args]


def _records(wt: Path) -> list[dict]:
    records, problems = read_journal(wt / "journal.jsonl")
    assert problems == []
    return [r for r in records if r.get("kind", "experiment") == "experiment"]


def test_the_smoke_preset_fills_what_was_not_given(monkeypatch):
    monkeypatch.delenv("AUTORESEARCH_TIME_BUDGET", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    c = cli.parse_args(["--tag", "s", "--smoke"])
    assert c.smoke and c.budget == SMOKE_DEFAULTS["budget"] and c.stops.max_experiments == 3
    assert c.baseline_repeats == 2 and c.ideas.proposer == "offline" and c.reviewer == "hierarchy"
    given = cli.parse_args(["--tag", "s", "--smoke", "--max-experiments", "5", "--baseline-repeats", "3"])
    assert given.stops.max_experiments == 5 and given.baseline_repeats == 3   # an option given wins
    assert not cli.parse_args(["--tag", "s"]).smoke and cli.parse_args(["--tag", "s"]).stops.max_experiments is None
    assert cli.given_options(["--tag", "s", "--smoke", "--budget", "5"]) == {"tag", "smoke", "budget"}


# A smaller model than the tiny profile's, for the tests that are about the loop's stops, not its figures.
SMALL = {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1}
# The smoke run's one knob edit by the user (the profile's is 3, the reference's 10): the tag's base
# commit writes the profile's values in and must leave this one as the user set it. Not the model's
# size: at the tiny profile's the offline proposer's changes are decided in few runs (a smaller model
# trains so alike that its gains sit at the noise band and the judge reruns them, ~2x the runs).
USER_KNOB = {"STARTUP_STEPS": 1}


@pytest.fixture(scope="module")
def smoke_run(tiny_cache, tmp_path_factory):
    """One `--smoke` run of the real train.py (tiny profile, sealed runs, the trusted evaluation,
    the judge hierarchy, the offline proposer), shared by the tests that read what it left:
    (repo, the user's HEAD, the environment, its output)."""
    tmp = tmp_path_factory.mktemp("smoke")
    files = copy_real()
    files["train.py"] = knobs.set_knobs(files["train.py"], USER_KNOB)
    repo = make_repo(tmp / "repo", files)
    user_head = git(repo, "rev-parse", "HEAD")
    env = _own_cache(tiny_cache, tmp)
    env.pop("AUTORESEARCH_PROFILE", None)     # the preset sets the tiny profile itself
    env["AUTORESEARCH_STEPS"] = "3"           # a step count already set wins over the preset's (test speed)
    p = subprocess.run(spied_loop_cmd(tmp / "spy.json", "--tag", "smoke", "--smoke"), cwd=repo, env=env,
                       capture_output=True, text=True, timeout=900)
    p.spy = json.loads((tmp / "spy.json").read_text()) if (tmp / "spy.json").exists() else None
    return repo, user_head, env, p


def test_smoke_run_then_resume_alone(smoke_run):
    """The README's first command, on the real train.py: a baseline and two judged experiments,
    the idea and the evaluation said while they run, an estimate at startup; then `--resume`
    with no other option continues the tag with its own settings."""
    repo, _, env, p = smoke_run
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    wt = repo / ".autoresearch" / "smoke"
    records = _records(wt)
    assert [r["n"] for r in records] == [1, 2, 3] and records[0]["proposer"] == "baseline"
    assert all(r["proposer"] == "offline" for r in records[1:])
    for r in records:
        if r["status"] != "crash":
            assert r["summary"]["profile"] == "tiny" and r["summary"]["num_steps"] == 3
            assert r["trusted_bpb"] is not None and r["verdicts"]["verify"]["ok"]   # the trusted evaluation
    assert len(records[0]["verdicts"]["judge"]["baseline_values"]) == 2   # two baseline runs
    # what a newcomer reads: the estimate first, then each idea, the evaluation, reruns as notes
    est = next(line for line in out.splitlines() if line.startswith("estimate:"))
    assert "trusted evaluation" in est and "2 baseline run(s)" in est and "--max-experiments 3" in est
    assert "exp 1: trying baseline (unmodified train.py)" in out
    for r in records[1:]:
        assert f"exp {r['n']}: trying {r['description']} -- hypothesis: {r['hypothesis']}" in out
    assert "exp 1: run 2 of 2 (measuring the noise)" in out
    assert "exp 1: evaluating" in out, "the trusted evaluation is said, not a training clock"
    assert "exp 1 keep: baseline run" not in out, "an interim call is never shown as a verdict"
    assert "exp 1: not decided yet: baseline run 1/2" in out
    settings = json.loads((wt / "run.json").read_text())["settings"]
    assert settings["smoke"] is True and settings["max_experiments"] == 3 and settings["budget"] == 10.0
    state = json.loads((wt / "state.json").read_text())
    assert state["phase"] == "stopped" and state["idea"] is None
    # --resume alone: run.json's settings are its defaults (budget, preset, --max-experiments)
    again = subprocess.run(_bare("--tag", "smoke", "--resume"), cwd=repo, env=env, capture_output=True,
                           text=True, timeout=600)
    said = again.stdout + again.stderr
    assert again.returncode == 0, said
    assert "refusing" not in said and "exp None" not in said
    assert "reached --max-experiments 3" in said
    assert [r["n"] for r in _records(wt)] == [1, 2, 3]


def test_the_trusted_figure_from_the_evaluator_to_the_journal_and_results_tsv(smoke_run):
    """The trust path (docs/architecture.md) on the default loop: every figure the journal and
    results.tsv hold is one the trusted evaluator answered, bit for bit, and it changes form three
    times: the worker's JSON -> the VerifyResult harness/verify.py makes of it (the very object the
    judge decides on: no copy, no re-encoding between the executor and the judge) -> the
    Decision's trusted_bpb (the mean of the runs it counted) -> the journal line and the row."""
    repo, _, _, p = smoke_run
    assert p.returncode == 0 and p.spy is not None, p.stdout + p.stderr
    answers, judged = p.spy["answers"], p.spy["judged"]
    made = {a["id"]: a["answer"] for a in answers}
    assert judged and all(j["id"] in made for j in judged), "the judge decided on an evaluation no worker answered"
    answered = {a["answer"]["trusted_bpb"] for a in answers if a["ok"]}
    wt = repo / ".autoresearch" / "smoke"
    rows = {r.commit: r for r in read_results(wt / "results.tsv").rows}
    decided = 0
    for r in _records(wt):
        if r["trusted_bpb"] is None:
            continue
        if "evidence" in r["verdicts"]:   # the runs the decision counted
            runs = [x["bpb"] for x in r["verdicts"]["evidence"]["candidate"]["runs"] if x["used"]]
        else:                             # a confirming run crashed: the runs that finished
            runs = r["verdicts"]["judge"]["runs"]
        assert runs and set(runs) <= answered, (r["n"], runs)   # 1: the worker's answers, exactly
        assert r["trusted_bpb"] == pytest.approx(sum(runs) / len(runs), abs=1e-12)   # 2
        assert r["verdicts"]["verify"]["trusted_bpb"] in answered
        row = rows[r["commit"][:7]]
        assert row.val_bpb == float(f"{r['trusted_bpb']:.6f}") and row.status == r["status"]   # 3
        decided += 1
    assert decided == 3


def test_the_smoke_night_loads_only_what_it_uses(smoke_run):
    """The modules a default --smoke night loaded (sys.modules at its exit): none of Optuna, Ray or
    braintrust, which load only when their option is given (the step search opens Optuna's study
    only for a jump), none of the satellites a plain night does not use, and no more of the
    project's than SMOKE_MODULES_MAX. docs/architecture.md lists them."""
    _, _, _, p = smoke_run
    assert p.returncode == 0 and p.spy is not None, p.stdout + p.stderr
    mods = p.spy["modules"]
    assert not [m for m in mods if m.split(".")[0] in ("optuna", "ray", "braintrust", "anthropic")]
    ours = sorted(m for m in mods if m.split(".")[0] in PROJECT_PACKAGES)
    unused = {"agent.import_run", "agent.workers", "agent.validate", "agent.proposers.offline", "agent.notify",
              "agent.proposers.claude", "agent.screening", "executors.ray_exec", "llm.client"}
    assert not unused & set(ours), sorted(unused & set(ours))
    assert len(ours) <= SMOKE_MODULES_MAX, f"{len(ours)} project modules: {ours}"


def test_the_smoke_run_s_records_branch_and_base_commit(smoke_run):
    """The loop end to end on the real train.py (what tests/test_loop.py checks on the stand-in):
    every finished run's invariants, the tag's base commit writing the tiny profile's knob values
    in (the user's own knob values kept), each record's summary, timings and trusted evaluation,
    run.json's figures and the traces' spans."""
    repo, user_head, _, p = smoke_run
    assert p.returncode == 0, p.stdout + p.stderr
    wt = repo / ".autoresearch" / "smoke"
    assert f"results: {wt / 'results.tsv'}" in p.stdout
    records, rows = check_run(repo, "smoke", 3, user_head)
    # train.py holds the reference's values: the tag's base is the commit that writes the tiny
    # profile's values in (a knob the user moved, STARTUP_STEPS 1, keeps its value), and it is the baseline
    run_json = json.loads((wt / "run.json").read_text())
    base = run_json["base_commit"]
    assert git(repo, "rev-parse", f"{base}^") == user_head and records[0]["commit"] == base
    assert git(repo, "log", "-1", "--format=%s", base) == "baseline: the tiny profile's knob values"
    base_knobs = knobs.values(git(repo, "show", f"{base}:train.py"))
    assert base_knobs["STARTUP_STEPS"] == 1 and base_knobs["DEPTH"] == 4      # the user's value; the profile's
    assert base_knobs["HEAD_DIM"] == 64 and base_knobs["COMPILE"] is False
    diff = git(repo, "diff", user_head, base, "--", "train.py")
    changed = [ln for ln in diff.splitlines() if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))]
    # knob lines only, and the bare run's in-memory rewrite replaced by a note that the values are written in
    call = [ln for ln in changed if knobs.PROFILE_CALL in ln or knobs.PROFILE_CALL_DONE in ln]
    assert [ln[0] for ln in call] == ["-", "+"]
    assert changed and all(re.match(r"^[+-][A-Z_]+ = ", ln) for ln in changed if ln not in call)
    assert records[0]["proposer"] == "baseline"
    for rec in records:
        if rec["status"] != "crash":
            assert rec["summary"], (rec["status"], rec["decision_reason"], rec.get("description"))
            assert rec["summary"]["profile"] == "tiny" and rec["summary"]["num_steps"] == 3
            assert rec["timings"]["run"] > 0 and "overhead" in rec["timings"]
            # the judge hierarchy decided on the trusted re-evaluation of the saved model
            assert rec["verdicts"]["verify"]["ok"] and rec["trusted_bpb"] is not None and rec["verify_seconds"] > 0
        assert (wt / rec["log"]).exists()
    assert all(r["proposer"] == "offline" for r in records[1:])
    assert run_json["budget"] == 10 and run_json["profile"] == "tiny"
    assert len(run_json["fingerprint"]) == 12
    spans = [json.loads(line)["name"] for line in (wt / "traces.jsonl").read_text().splitlines()]
    assert {"propose", "run", "judge"} <= set(spans)


def test_a_shard_deleted_mid_run_stops_the_loop_and_resume_loses_nothing(tiny_cache, tmp_path):
    """The training shard goes while experiment 2 starts (its train.py waits for the test at a
    gate, then finds no data): no crash is recorded, the loop stops with one line saying what to
    run and a distinct status; with the shard back, --resume runs experiment 2 again (the last:
    a small model, two experiments)."""
    files = copy_real()
    gate = tmp_path / "gate"
    files["train.py"] = knobs.set_knobs(files["train.py"], SMALL).replace(
        "    loader = prepare.make_dataloader(",
        "    while 'exp-0002' in os.environ.get('AUTORESEARCH_ARTIFACT', '') and not os.path.exists("
        f"{str(gate)!r}):\n        time.sleep(0.1)\n    loader = prepare.make_dataloader(", 1)
    assert str(gate) in files["train.py"]
    repo = make_repo(tmp_path / "repo", files)
    env = _own_cache(tiny_cache, tmp_path)
    env["AUTORESEARCH_STEPS"] = "2"
    args = ("--tag", "d", "--budget", "2", "--max-experiments", "2", "--reviewer", "simple",
            "--sandbox", "none", "--fix-tries", "0")
    proc = subprocess.Popen(loop_cmd(*args), cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wt = repo / ".autoresearch" / "d"
    log = wt / "logs" / "exp-0002.log"
    deadline = time.time() + 400
    while time.time() < deadline and not (log.exists() and "params" in log.read_text()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    recorded = json.loads((wt / "run.json").read_text())["inventory"]["data"]
    shards = [p for p in Path(env["AUTORESEARCH_CACHE"]).rglob("shard_*.parquet")
              if p.name in recorded and p.name != "shard_06542.parquet"]   # the training shards, not validation
    assert shards
    kept = tmp_path / "kept"
    kept.mkdir()
    for shard in shards:
        shutil.move(shard, kept / shard.name)
    gate.write_text("go")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 78, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "uv run prepare.py" in lines[0] and "--tag d --resume" in lines[0], err
    assert "missing" in lines[0] or "no training shard" in lines[0]
    assert [r["n"] for r in _records(wt)] == [1], "the environment fault is no crash of experiment 2"
    assert [p.n for p in undecided(read_journal(wt / "journal.jsonl", kind=None)[0])] == [2], \
        "experiment 2 stays pending for --resume"
    # --resume refuses while the shard is missing, the same way
    still = run_loop(repo, env, "--tag", "d", "--resume", timeout=300)
    assert still.returncode == 78 and "uv run prepare.py" in still.stderr
    for shard in shards:
        shutil.move(kept / shard.name, shard)
    done = run_loop(repo, env, "--tag", "d", "--resume", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    records = _records(wt)
    assert [r["n"] for r in records] == [1, 2] and all(r["status"] != "crash" for r in records)
    rows = read_results(wt / "results.tsv").rows
    assert len(rows) == 2


def test_two_loops_started_at_once_on_a_new_tag(tmp_path):
    """One wins, the other exits cleanly having touched nothing, and the tag stays usable."""
    repo = fake_repo(tmp_path / "repo")
    env = fake_env(tmp_path, FAKE_SLEEP="0.5")
    cmd = loop_cmd("--tag", "twin", "--budget", "1", "--max-experiments", "3")
    procs = [subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], results
    loser = results[[p.returncode for p in procs].index(2)]
    assert "another loop is running tag twin" in loser[1] and "Traceback" not in loser[1]
    wt = repo / ".autoresearch" / "twin"
    assert [r["n"] for r in _records(wt)] == [1, 2, 3]
    again = run_loop(repo, env, "--tag", "twin", "--resume", "--max-experiments", "4")
    assert again.returncode == 0, again.stdout + again.stderr
    assert [r["n"] for r in _records(wt)] == [1, 2, 3, 4]


def test_resume_takes_the_budget_of_run_json_and_a_wrong_tag_lists_the_tags(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    env = fake_env(tmp_path)
    env.pop("AUTORESEARCH_TIME_BUDGET", None)
    assert run_loop(repo, env, "--tag", "may29", "--budget", "1", "--max-experiments", "2").returncode == 0
    p = run_loop(repo, env, "--tag", "may29", "--resume", "--max-experiments", "3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "refusing" not in p.stderr and "budget 1s" in p.stdout
    wrong = run_loop(repo, env, "--tag", "may2", "--resume")
    assert wrong.returncode == 2 and "no tag 'may2'" in wrong.stderr and "the tags here: may29" in wrong.stderr
    mixed = run_loop(repo, env, "--tag", "may29", "--resume", "--budget", "5")
    assert mixed.returncode == 2 and "refusing --budget 5" in mixed.stderr   # one tag never mixes budgets
    assert git(repo, "branch", "--list", "autoresearch/may2") == ""


def test_a_short_budget_is_evaluated_on_a_share_of_the_tokens():
    """A 30 s run is not measured for minutes: the trusted evaluation's tokens follow the budget
    below the reference 300 s (never under EVAL_TOKENS_MIN), and reach the evaluation job."""
    from agent.cli import EVAL_TOKENS_MIN, eval_tokens_for
    from agent.experiment import eval_spec
    assert eval_tokens_for(128 * 1024, 30) == 13107
    assert eval_tokens_for(128 * 1024, 300) is None and eval_tokens_for(128 * 1024, 600) is None
    assert eval_tokens_for(8192, 10) is None, "the tiny profile's evaluation is already the minimum"
    assert eval_tokens_for(128 * 1024, 10) == EVAL_TOKENS_MIN and eval_tokens_for(40 * 524288, 1) == 69905
    spec = eval_spec(None, prepare_source="", train_source="", profile="cpu", eval_tokens=13107)
    assert spec.eval_tokens == 13107


def test_prepare_sees_a_missing_training_shard_of_several(tiny_cache, tmp_path):
    """`uv run prepare.py`, the command the loop's stop names, must write a deleted shard again:
    our own data's manifest says how many training shards its documents fill."""
    import prepare
    data = next(Path(tiny_cache["AUTORESEARCH_CACHE"]).glob("data/*/manifest.json")).parent
    mine = tmp_path / "data"
    shutil.copytree(data, mine)
    assert prepare._shards_ok(mine)
    manifest = json.loads((mine / "manifest.json").read_text())
    manifest["docs"]["train"] = prepare.DOCS_PER_SHARD + 1   # two training shards' worth
    (mine / "manifest.json").write_text(json.dumps(manifest))
    assert not prepare._shards_ok(mine), "shard_00001 is missing"
    shutil.copy(mine / "shard_00000.parquet", mine / "shard_00001.parquet")
    assert prepare._shards_ok(mine)


def test_the_environment_check_names_each_fault_and_the_command(tiny_cache, tmp_path):
    """Real prepared data (a copy): a truncated shard, a lost tokenizer, a shard missing from the
    tag's inventory and a fixed file gone are each named; the command restores the same data."""
    from agent import envcheck
    from harness.sandbox import DataView
    cache = tmp_path / "cache"
    shutil.copytree(tiny_cache["AUTORESEARCH_CACHE"], cache)
    pointer = json.loads(next(cache.glob("prepared-*.json")).read_text())
    data, tok = cache / pointer["data"], cache / pointer["tokenizer"]
    view = DataView(cache=cache, data=data, tokenizer=tok, val=data / "shard_06542.parquet")
    wt = tmp_path / "wt"
    wt.mkdir()
    for name in envcheck.FIXED_FILES:
        (wt / name).write_text("# fixed\n")
    recorded = envcheck.inventory(wt, view)
    assert recorded["files"] == list(envcheck.FIXED_FILES) and "shard_00000.parquet" in recorded["data"]
    assert envcheck.problems(wt, view, recorded) == []
    train = data / "shard_00000.parquet"
    train.write_bytes(train.read_bytes()[:1000])            # a partial download
    (tok / "tokenizer.pkl").unlink()
    (wt / "runtime.py").unlink()
    found = envcheck.problems(wt, view, dict(recorded, data=recorded["data"] + ["shard_00001.parquet"]))
    text = "; ".join(found)
    assert "shard_00000.parquet" in text and "corrupt" in text
    assert "shard_00001.parquet missing" in text and "tokenizer" in text and "runtime.py is missing" in text
    assert envcheck.prepare_command("tiny", "offline-fallback") == "AUTORESEARCH_PROFILE=tiny uv run prepare.py --offline"
    assert envcheck.prepare_command("gpu", "climbmix") == "uv run prepare.py"
    assert envcheck.prepare_command("cpu", "local:/my data") == "AUTORESEARCH_PROFILE=cpu uv run prepare.py --source '/my data'"
