"""Argument validation and clean starts.

Bad arguments end with a clear message and exit 2 before anything exists (no branch, no
worktree, no state.json); Ctrl-C or kill -9 during the first data preparation leaves no tag that
then demands --resume; the other command lines answer --help without running anything.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import cli
from agent import loop as loop_mod
from tests.loop_fixtures import (FAKE_PREPARE, FAKE_TRAIN, REPO, fake_env, fake_repo, git, make_repo, pid_alive,
                                 run_loop)

BAD = [
    (["--tag", ""], "the tag is empty"),
    (["--tag", "a b"], "only letters, digits"),
    (["--tag", "../x"], "only letters, digits"),
    (["--tag", "a/b"], "only letters, digits"),
    (["--tag", "a..b"], "may not contain '..'"),
    (["--tag", "x~1"], "only letters, digits"),
    (["--tag", "x^"], "only letters, digits"),
    (["--tag", "x:y"], "only letters, digits"),
    (["--tag=-rf"], "must start with a letter or a digit"),
    (["--tag", ".hidden"], "must start with a letter or a digit"),
    (["--tag", "x.lock"], "'.lock'"),
    (["--tag", "t", "--budget", "-5"], "--budget must be a positive number"),
    (["--tag", "t", "--budget", "0"], "--budget must be a positive number"),
    (["--tag", "t", "--budget", "nan"], "--budget must be a positive number"),
    (["--tag", "t", "--max-experiments", "-1"], "--max-experiments must be at least 1"),
    (["--tag", "t", "--max-experiments", "0"], "--max-experiments must be at least 1"),
    (["--tag", "t", "--until", "25:00"], "--until wants HH:MM"),
    (["--tag", "t", "--until", "7pm"], "--until wants HH:MM"),
    (["--tag", "t", "--timeout", "0"], "--timeout must be a positive number"),
    (["--tag", "t", "--baseline-repeats", "0"], "--baseline-repeats must be at least 1"),
    (["--tag", "t", "--screen", "0"], "--screen must be at least 1"),
    (["--tag", "t", "--fix-tries", "-1"], "--fix-tries must be at least 0"),
    (["--tag", "t", "--max-cost", "-1"], "--max-cost must be a number of dollars >= 0"),
    (["--tag", "t", "--max-cost", "inf"], "--max-cost must be a number of dollars >= 0"),
    (["--tag", "t", "--max-cost", "nan"], "--max-cost must be a number of dollars >= 0"),
    (["--tag", "t", "--crash-streak", "-1"], "--crash-streak must be at least 0"),
    (["--tag", "t", "--offline-search", "grid"], "invalid choice: 'grid'"),
    # A prefix is no option: it would be taken silently for whichever option it begins.
    (["--tag", "t", "--max-experiment", "2"], "unrecognized arguments: --max-experiment"),
    (["--tag", "t", "--smok"], "unrecognized arguments: --smok"),
    (["--tag", "t", "--resum"], "unrecognized arguments: --resum"),
    (["--tag=t", "--budg=5"], "unrecognized arguments: --budg=5"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) or "empty" for a, _ in BAD])
def test_bad_arguments_are_refused_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        loop_mod.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_good_arguments_pass():
    args = loop_mod.parse_args(["--tag", "may29.run_2-b", "--budget", "30", "--max-experiments", "1",
                                "--until", "23:59", "--fix-tries", "0"])
    assert args.tag == "may29.run_2-b" and args.budget == 30.0


def test_the_loop_is_configured_by_a_frozen_loop_config(monkeypatch):
    """parse_args gives a LoopConfig with every default filled in, that no step can change; each
    option of the parser is one of its fields (a new option without a field fails here)."""
    import dataclasses
    from agent.config import LoopConfig
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("AUTORESEARCH_TIME_BUDGET", raising=False)
    config = loop_mod.parse_args(["--tag", "t", "--workers", "2", "--gpus", "0,1"])
    assert isinstance(config, LoopConfig)
    assert config.budget == cli.DEFAULT_BUDGET and config.ideas.proposer == "offline" and config.reviewer == "hierarchy"
    assert config.place.workers == 2 and config.place.gpus == "0,1" and config.parallel
    assert not loop_mod.parse_args(["--tag", "t"]).parallel and loop_mod.parse_args(["--tag", "t", "--executor", "ray"]).parallel
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.budget = 1.0
    dests = {a.dest for a in cli.parser()._actions if a.dest != "help"}
    assert dests == set(LoopConfig.option_names())
    # one table of defaults: what an option left out becomes is LoopConfig's own default
    plain = loop_mod.parse_args(["--tag", "t"])
    defaults = LoopConfig(tag="t", budget=0.0)
    for name in LoopConfig.option_names():
        if name not in ("tag", "budget"):
            assert plain.value(name) == defaults.value(name), (name, plain.value(name), defaults.value(name))
    assert "(default 3; 0: never)" in " ".join(cli.parser().format_help().split())   # --crash-streak's help
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert loop_mod.parse_args(["--tag", "t"]).ideas.proposer == "claude"   # the default follows the key


def test_bad_budget_from_the_environment_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("AUTORESEARCH_TIME_BUDGET", "-3")
    with pytest.raises(SystemExit):
        loop_mod.parse_args(["--tag", "t"])
    assert "AUTORESEARCH_TIME_BUDGET" in capsys.readouterr().err


@pytest.mark.parametrize("tag", ["ok", "may29", "a.b", "A-1_2", "x@y", "a{b", "a\\b", "a*b", "a?b", "a[b",
                                 "x" * 101, "a.", "@", "weird\x7f"])
def test_every_accepted_tag_is_a_valid_git_branch(tag):
    """Our rule is stricter than git's: whatever it accepts, git check-ref-format accepts too."""
    ok = cli.tag_problem(tag) is None
    git_ok = subprocess.run(["git", "check-ref-format", "--branch", f"autoresearch/{tag}"],
                            capture_output=True).returncode == 0
    assert not ok or git_ok
    assert ok == (tag in ("ok", "may29", "a.b", "A-1_2"))


def _nothing_created(repo: Path):
    assert not (repo / ".autoresearch").exists(), list((repo / ".autoresearch").rglob("*"))
    assert git(repo, "branch", "--list", "autoresearch/*") == ""
    assert git(repo, "for-each-ref", "refs/autoresearch") == ""
    assert not list(repo.rglob("state.json"))


@pytest.mark.parametrize("argv", [["--tag", ""], ["--tag", "a b"], ["--tag", "../x"],
                                  ["--tag", "t", "--budget", "-5"], ["--tag", "t", "--max-experiments", "-1"]])
def test_the_loop_creates_nothing_on_bad_arguments(tmp_path, argv):
    repo = fake_repo(tmp_path / "repo")
    p = run_loop(repo, fake_env(tmp_path), *argv)
    assert p.returncode == 2 and "error:" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "git " not in p.stderr, "no raw git error"
    _nothing_created(repo)


# A stand-in prepare.py that takes its time, so a signal can arrive during the first preparation.
SLOW_PREPARE = FAKE_PREPARE.replace('if __name__ == "__main__":\n',
                                    'if __name__ == "__main__":\n    import time\n'
                                    '    time.sleep(float(os.environ.get("FAKE_PREP_SLEEP", "0")))\n')


def _start_preparing(repo, env, tag):
    proc = subprocess.Popen([sys.executable, str(REPO / "agent" / "loop.py"), "--tag", tag, "--budget", "1",
                             "--max-experiments", "1", "--reviewer", "simple"], cwd=repo,
                            env=dict(env, FAKE_PREP_SLEEP="60"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    log = repo / ".autoresearch" / tag / "logs" / "prepare.log"
    deadline = time.time() + 60
    while not log.exists() and time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    assert log.exists(), "the loop never started preparing data"
    time.sleep(0.3)
    return proc


def test_ctrl_c_during_the_first_preparation_leaves_no_half_made_tag(tmp_path):
    repo = make_repo(tmp_path / "repo", {"prepare.py": SLOW_PREPARE, "train.py": FAKE_TRAIN,
                                         "program.md": "research\n"})
    env = fake_env(tmp_path)
    proc = _start_preparing(repo, env, "first")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "removed tag first" in out and "the same command starts it again" in out
    assert git(repo, "branch", "--list", "autoresearch/*") == ""
    assert not (repo / ".autoresearch" / "first").exists()
    again = run_loop(repo, env, "--tag", "first", "--budget", "1", "--max-experiments", "1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "stopped, reached --max-experiments 1" in again.stdout


def test_kill9_during_the_first_preparation_then_the_same_command_starts_afresh(tmp_path):
    repo = make_repo(tmp_path / "repo", {"prepare.py": SLOW_PREPARE, "train.py": FAKE_TRAIN,
                                         "program.md": "research\n"})
    env = fake_env(tmp_path)
    proc = _start_preparing(repo, env, "k9")
    pid_file = repo / ".autoresearch" / "k9" / "child-prepare.pid"
    deadline = time.time() + 60
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.05)
    prep = json.loads(pid_file.read_text())["pgid"]
    proc.kill()   # kill -9 of the loop alone: its stop path never runs
    proc.wait()
    assert pid_alive(prep), "the orphaned prepare.py outlives its loop (its own process group)"
    assert git(repo, "branch", "--list", "autoresearch/k9"), "kill -9 left the half-made tag"
    again = run_loop(repo, env, "--tag", "k9", "--budget", "1", "--max-experiments", "1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert not pid_alive(prep), "the next start ended the group the killed loop left"
    assert "never ran an experiment" in again.stdout and "removed it to start afresh" in again.stdout
    assert len((repo / ".autoresearch" / "k9" / "results.tsv").read_text().splitlines()) == 2


def test_a_tag_with_a_recorded_experiment_is_never_removed(tmp_path):
    repo = fake_repo(tmp_path / "repo")
    env = fake_env(tmp_path)
    assert run_loop(repo, env, "--tag", "kept", "--budget", "1", "--max-experiments", "3").returncode == 0
    wt = repo / ".autoresearch" / "kept"
    tip = git(repo, "rev-parse", "autoresearch/kept")
    assert not cli.unstarted(wt)
    assert cli.discard_unstarted(repo, "kept", wt) is False
    again = run_loop(repo, env, "--tag", "kept", "--budget", "1", "--max-experiments", "1")
    assert again.returncode == 2 and "pass --resume" in again.stderr
    # even with its records gone (a wiped folder), a branch with experiments' commits or refs stays
    for name in ("journal.jsonl", "results.tsv"):
        (wt / name).unlink()
    assert cli.unstarted(wt) and cli.discard_unstarted(repo, "kept", wt) is False
    import shutil
    shutil.rmtree(wt)
    assert cli.discard_unstarted(repo, "kept", wt) is False, "a missing worktree is --resume's to repair"
    assert git(repo, "rev-parse", "autoresearch/kept") == tip


# ---- --help everywhere (item 7) -------------------------------------------------------------------
def test_pipeline_help_runs_nothing(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), PATH=os.environ["PATH"])
    p = subprocess.run(["bash", str(REPO / "scripts" / "pipeline.sh"), "--help"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert p.returncode == 0 and p.stdout.startswith("usage: scripts/pipeline.sh")
    assert "SWEEP_MAX_STEPS" in p.stdout and "== install" not in p.stdout
    assert not (tmp_path / "out").exists(), "nothing ran"
    bad = subprocess.run(["bash", str(REPO / "scripts" / "pipeline.sh"), "--sweep"], capture_output=True, text=True,
                         env=env, timeout=30)
    assert bad.returncode == 2 and "unknown argument" in bad.stderr and not (tmp_path / "out").exists()


def test_train_help_trains_nothing(monkeypatch, capsys, tmp_path):
    import runpy
    monkeypatch.setattr(sys, "argv", ["train.py", "--help"])
    monkeypatch.setenv("AUTORESEARCH_ARTIFACT", str(tmp_path / "model.pt"))
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(REPO / "train.py"), run_name="__main__")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: uv run train.py") and "AUTORESEARCH_STEPS" in out and "---" not in out
    assert not (tmp_path / "model.pt").exists()


@pytest.mark.parametrize("module,expect", [("search.sweep", "usage: python -m search.sweep"),
                                           ("search.throughput", "usage: python -m search.throughput"),
                                           ("search.arms", "usage: python -m search.arms")])
def test_harness_clis_help(module, expect, capsys):
    import importlib
    mod = importlib.import_module(module)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and out.startswith(expect) and "docs/hyperband.md" in out


def test_hyperband_help_names_the_real_command():
    p = subprocess.run([sys.executable, "-m", "search", "--help"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "python -m search sweep [options]" in p.stdout
    assert "see --help" not in p.stdout + p.stderr
    sub = subprocess.run([sys.executable, "-m", "search", "sweep", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0 and sub.stdout.startswith("usage: python -m search sweep")
    none = subprocess.run([sys.executable, "-m", "search"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert none.returncode == 2 and "usage:" in none.stderr


def test_loop_timeout_help_matches_the_runner(capsys):
    from harness.runner import timeout_for
    with pytest.raises(SystemExit):
        loop_mod.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default max(2x budget, budget + 300 s)" in out
    assert timeout_for(300) == 600 and timeout_for(10) == 310   # what that help says


def test_review_list_on_a_run_without_a_queue(tmp_path):
    from agent import review_queue as review
    (tmp_path / "results.tsv").write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n")
    p = subprocess.run([sys.executable, str(REPO / "agent" / "review_queue.py"), "--run", str(tmp_path), "list"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("no pending items"), p.stderr
    assert not (tmp_path / review.QUEUE_FILE).exists(), "listing creates no queue"


# The folders whose command lines are the project's (train.py has no argparse: it reads the environment).
CLI_FOLDERS = ("agent", "dashboard", "scripts", "harness", "search", "executors", "llm", "runfiles", "inference", "lab")


def _parser_calls():
    """(module, line) of every argparse parser the project builds: ArgumentParser(...) and subparsers'
    add_parser(...), with whether the call says allow_abbrev=False."""
    import ast
    files = [p for d in CLI_FOLDERS for p in sorted((REPO / d).rglob("*.py"))] + [REPO / "prepare.py"]
    out = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            name = getattr(node, "func", None)
            name = getattr(name, "attr", getattr(name, "id", None))
            if isinstance(node, ast.Call) and name in ("ArgumentParser", "add_parser"):
                refused = any(k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant) and k.value.value is False
                              for k in node.keywords)
                out.append((".".join(path.relative_to(REPO).with_suffix("").parts), node.lineno, refused))
    return out


class _Built(Exception):
    """Raised instead of parsing: the parser a command built is caught before it runs anything."""


def _all_parsers(top):
    """A parser and its subcommands' parsers, recursively."""
    import argparse
    out = [top]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                out += _all_parsers(sub)
    return out


def test_every_parser_refuses_abbreviated_options(monkeypatch, capsys):
    """Every command line of the project, walked: each parser it builds (subcommands included) has
    allow_abbrev=False, so `--max-experiment 2`, `--smok`, `--resum` are errors, never another option;
    and `--hel`, which an abbreviating parser takes for --help (exit 0), exits 2 on every one."""
    import argparse
    import importlib
    calls = _parser_calls()
    assert len(calls) >= 40, f"the walk found only {len(calls)} parsers"
    assert not [c for c in calls if not c[2]], [f"{m}:{line}" for m, line, ok in calls if not ok]
    built = []

    def grab(self, *args, **kwargs):
        built.append(self)
        raise _Built

    modules = sorted({m for m, _, _ in calls})
    for name in modules:
        mod = importlib.import_module(name)
        entry = getattr(mod, "main", None) or mod.parser   # agent/cli.py builds the loop's in parser()
        if entry is getattr(mod, "parser", None):
            built.append(entry())
            continue
        monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", grab)
        monkeypatch.setattr(sys, "argv", [name, "--hel"])
        with pytest.raises(_Built):
            entry()
        monkeypatch.undo()
        monkeypatch.setattr(sys, "argv", [name, "--hel"])
        with pytest.raises(SystemExit) as exc:
            entry()
        assert exc.value.code == 2, f"{name}: --hel was taken for --help"
        monkeypatch.undo()
    capsys.readouterr()
    parsers = [p for top in built for p in _all_parsers(top)]
    assert len(built) == len(modules) and len(parsers) > len(modules), "subcommands are walked too"
    assert [p.prog for p in parsers if p.allow_abbrev is not False] == []
