"""A CPU night that keeps its estimate: a cpu or tiny tag's runs get the torch threads of the cores
other work leaves free (measured when the tag starts, kept in run.json), its trusted evaluation is
sized to a small share of the budget on those threads, the opening estimate says what machine it
assumes, and an eta line after every run says what a run really takes here."""
import json
import subprocess
import sys

import pytest

from agent import cli, hardware
from harness.procs import ncpu
from tests.loop_fixtures import fake_env, fake_repo, run_loop


@pytest.mark.parametrize("cores, busy, threads", [(2, 0.05, 2), (2, 0.2, 2), (2, 0.3, 1), (2, 1.0, 1),
                                                  (2, 1.9, 1), (2, 2.0, 1), (8, 3.1, 5), (8, 3.3, 4), (8, 0.0, 8)])
def test_threads_are_the_free_cores_at_least_one(cores, busy, threads):
    assert hardware.MachineNow(cores=cores, busy=busy).threads == threads


def test_the_evaluation_stays_a_small_share_of_a_cpu_budget():
    profile = 128 * 1024    # the cpu profile's EVAL_TOKENS
    one = cli.eval_tokens_for(profile, 300, threads=1)
    assert one == int((cli.EVAL_SHARE * 300 - cli.EVAL_START_S) * cli.eval_rate(1))
    assert cli.EVAL_START_S + one / cli.eval_rate(1) <= cli.EVAL_SHARE * 300 + 1e-6
    two = cli.eval_tokens_for(profile, 300, threads=2) or profile
    assert one < two <= profile, "two free cores evaluate more of it in the same share of the budget"
    assert cli.eval_tokens_for(profile, 300) is None, "a GPU tag (no threads) keeps the profile's tokens"
    assert cli.eval_tokens_for(profile, 10, threads=1) == cli.EVAL_TOKENS_MIN, "never below the minimum"
    assert cli.run_seconds(300, one, threads=1) < cli.run_seconds(300, profile, threads=1)
    assert cli.run_seconds(300, profile, threads=1) > cli.run_seconds(300, profile, threads=2) > 300 * 1.1
    # a GPU tag's evaluation is not guessed at a CPU's rate (21M tokens would read as hours)
    assert cli.run_seconds(300, 40 * 524288) == cli.run_seconds(300, None) < 300 * 1.1 + 60


def test_the_opening_estimate_says_the_machine_it_assumes():
    now = hardware.MachineNow(cores=2, busy=1.02)
    note = cli.eta_note(baseline_repeats=2, max_experiments=None, budget=300, eval_tokens=None, steps=None,
                        threads=now.threads, machine=now.said(now.threads))
    assert note.endswith("on this machine as it is now: 2 cores, 1.0 busy with other work, 1 torch thread(s) per run")
    assert cli.eta_note(baseline_repeats=2, max_experiments=None, budget=300, eval_tokens=None,
                        steps=None).endswith("on an idle machine")


def test_a_busy_core_gives_the_runs_one_thread_fewer_and_every_run_an_eta(tmp_path):
    """A real loop (stand-in train.py) started while another process keeps a core busy: run.json
    records the threads its runs got (never more than the free cores), the runs see them, --resume
    keeps that count, and after every run an eta line gives the measured pace."""
    repo = fake_repo(tmp_path / "repo")
    env = fake_env(tmp_path)
    env.pop("AUTORESEARCH_THREADS")            # the loop chooses
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        p = run_loop(repo, env, "--tag", "busy", "--budget", "1", "--max-experiments", "2")
    finally:
        burner.kill()
        burner.wait()
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    wt = repo / ".autoresearch" / "busy"
    threads = json.loads((wt / "run.json").read_text())["threads"]
    assert 1 <= threads <= max(1, ncpu() - 1), threads
    etas = [line for line in p.stdout.splitlines() if "eta: a run takes about" in line]
    runs = len(list((wt / "logs").glob("exp-*.log")))
    assert runs >= 2 and len(etas) == runs, (runs, etas)
    # before the first experiment after the baseline: one measured run each, not the baseline's pace
    before = next(line for line in p.stdout.splitlines() if line.startswith("eta: experiment 2 of 2 next"))
    assert "if each is decided on one run" in before and "pace" not in before, before
    again = run_loop(repo, env, "--tag", "busy", "--resume", "--max-experiments", "3")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((wt / "run.json").read_text())["threads"] == threads, "a resumed tag keeps its count"
