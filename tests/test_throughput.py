"""The worker pool with real training (tiny profile, a ~0.2M-parameter model, a few steps).

Checked: an in-process worker gives the same val_bpb as running the file as a script; a run
resumed from a pre-decay checkpoint ends where an uninterrupted run ends; adaptive threads give
a lone task all cores; a crashing candidate (exception, hard exit, leaked torch state) loses
nothing and does not poison the next task; screen() ranks sources by successive halving.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from search import knobs
from search.hyperband import Task, TaskState
from search.pool import Pool, run_tasks, task_env
from search.halving import screen, screen_bracket
from search.space import SMALL_BASE

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def small_train(tiny_cache, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cands")
    src = knobs.set_knobs(knobs.for_profile((REPO / "train.py").read_text(), "tiny")[0], SMALL_BASE)
    path = folder / "small.py"
    path.write_text(src)
    return path


@pytest.fixture(scope="module")
def pool(tiny_cache, tmp_path_factory):
    with Pool(2, prepare_dir=REPO, log_dir=tmp_path_factory.mktemp("logs"), cores=2) as p:
        yield p


def test_resume_from_checkpoint_matches_uninterrupted_run(pool, small_train, tmp_path):
    ck = tmp_path / "ck.pt"
    straight = Task("straight", "c", small_train, steps=8, decay_steps=2)
    first = Task("first", "c", small_train, steps=4, decay_steps=2, state=TaskState(save=ck))
    a, b = run_tasks(pool, [straight, first])
    assert a.val_bpb is not None and b.val_bpb is not None, (a.error, b.error)
    assert a.task.threads == b.task.threads == 1           # two tasks share the two cores
    assert ck.exists()
    # pinned to one thread like the straight run: thread count changes float summation order
    resumed = Task("resumed", "c", small_train, steps=8, decay_steps=2, state=TaskState(start_steps=4, resume=ck),
                   meta={"pin_threads": 1})
    (c,) = run_tasks(pool, [resumed])
    log = c.log.read_text()
    assert "resumed from" in log and "threads 1" in log
    assert c.summary["num_steps"] == 10                      # 4 stable done + 4 stable + 2 decay
    assert c.val_bpb == pytest.approx(a.val_bpb, abs=1e-4)  # same state as the uninterrupted run
    assert abs(b.val_bpb - a.val_bpb) > 100 * abs(c.val_bpb - a.val_bpb)   # it really trained on


def test_a_lone_task_gets_the_idle_cores(pool, small_train):
    (c,) = run_tasks(pool, [Task("lone", "c", small_train, steps=1, decay_steps=0)])
    assert c.task.threads == 2 and "threads 2" in c.log.read_text()


def test_inprocess_worker_matches_running_the_script(pool, small_train, tiny_cache, tmp_path):
    task = Task("same", "c", small_train, steps=5, decay_steps=1, seed=3, threads=1)
    (res,) = run_tasks(pool, [task])
    env = dict(tiny_cache, **task_env(res.task), PYTHONPATH=str(REPO))
    env["AUTORESEARCH_THREADS"] = str(res.task.threads)
    out = subprocess.run([sys.executable, str(small_train)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    from harness.clock import parse_summary
    script = parse_summary(out.stdout)
    assert script["num_steps"] == res.summary["num_steps"] == 6
    assert script["val_bpb"] == pytest.approx(res.val_bpb, abs=1e-3)


def test_crashes_lose_nothing_and_do_not_leak(pool, small_train, tmp_path):
    base = small_train.read_text()
    leak = tmp_path / "leak.py"        # flips a torch global, then fails
    leak.write_text("import torch\ntorch.set_default_dtype(torch.float64)\nraise RuntimeError('boom')\n")
    hard = tmp_path / "hard.py"        # kills its process outright
    hard.write_text("import os\nos._exit(3)\n")
    fail = tmp_path / "fail.py"        # train.py's own FAIL path (exploding loss)
    fail.write_text(knobs.set_knobs(base, {"EXPLODE_FACTOR": 0.01}))
    res = run_tasks(pool, [Task("leak", "l", leak, 2, 1), Task("hard", "h", hard, 2, 1),
                           Task("fail", "f", fail, 3, 1)])
    assert res[0].val_bpb is None and "boom" in res[0].error
    assert res[1].val_bpb is None and "worker died" in res[1].error
    assert res[2].val_bpb is None and res[2].error.startswith("FAIL:")
    (ok,) = run_tasks(pool, [Task("after", "c", small_train, 3, 1)])
    assert ok.val_bpb is not None, ok.error
    assert "float64" not in ok.log.read_text()


def test_screen_ranks_by_successive_halving(pool, small_train, tmp_path):
    assert [(r.n, r.steps) for r in screen_bracket(4, 2, 3).rungs] == [(4, 2), (1, 6)]
    base = small_train.read_text()
    sources = [knobs.set_knobs(base, {"MATRIX_LR": 0.02}),
               "raise SystemExit('FAIL: broken edit')\n",
               knobs.set_knobs(base, {"MATRIX_LR": 0.0005, "EMBEDDING_LR": 0.001})]
    res = screen(sources, workdir=tmp_path / "screen", prepare_dir=REPO, min_steps=3, eta=3,
                 decay_steps=1, pool=pool, labels=["default", "broken", "tiny lr"])
    assert res.ranking[-1] == 1 and res.winner == res.ranking[0]
    assert [r["candidate"] for r in res.records] == res.ranking
    assert all(r["kind"] == "screen" for r in res.records)
    win = res.records[0]
    assert win["winner"] and win["rungs"][-1]["steps"] == 9 and win["rungs"][-1]["val_bpb"] is not None
    assert res.records[-1]["rungs"][0]["error"]


def test_a_bench_whose_arms_measured_nothing_fails_with_the_reason(tmp_path):
    """No prepared data: every task fails, so there is no speedup and no winner to report; the
    bench says why and exits non-zero (it printed 'speedup 3.67x, same winner: True' before)."""
    env = dict(os.environ, AUTORESEARCH_CACHE=str(tmp_path / "empty"), AUTORESEARCH_PROFILE="tiny")
    proc = subprocess.run([sys.executable, "-m", "search.throughput", "bench", "--max-steps", "2",
                           "--min-steps", "1", "--eta", "2", "--out", str(tmp_path / "out")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the baseline arm measured nothing" in proc.stderr and "no tokenizer" in proc.stderr
    assert "speedup" not in proc.stdout and not (tmp_path / "out" / "bench.json").exists()
