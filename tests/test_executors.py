"""Executors (executors/): jobs run side by side, per-slot GPUs, nothing left behind on
cancel, Ray tasks run from materialised files and send their log back, and a real tiny train.py
job comes back with a trusted val_bpb. Ray tests share one small local runtime (start-up ~10 s)."""
import fnmatch
import json
import sys
import time
from pathlib import Path

import pytest

from agent import gitops
from harness import runner
from harness import verify as pinned_inputs
from harness.job import FIXED_SOURCES
from agent.experiment import eval_spec, job_seal
from executors import Executor, wait
from harness.job import TrainJob
from harness.runner import CANCELLED, RunResult
from executors import LocalExecutor
from harness.sandbox import DataView, detect
from harness.verify import eval_rows
from tests.loop_fixtures import REPO, pid_alive

# A stand-in train.py: prints when it ran, where, on which GPU; saves a "model"; or hangs with a
# helper child (STANDIN_HANG), recording both pids, so a cancel can be checked.
STANDIN = '''
import os, subprocess, sys, time
print("start", repr(time.time()), flush=True)
print("cwd", os.getcwd(), flush=True)
print("gpu", os.environ.get("CUDA_VISIBLE_DEVICES", "-"), flush=True)
pids = os.environ.get("STANDIN_PIDS")
if pids:
    child = subprocess.Popen(["sleep", "300"])
    with open(pids + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.replace(pids + ".tmp", pids)
    time.sleep(300)
time.sleep(float(os.environ.get("STANDIN_SLEEP", "1.5")))
with open(os.environ["AUTORESEARCH_ARTIFACT"], "wb") as f:
    f.write(b"stand-in model")
print("step 00001 | loss 1.0 | trained 1.0s")
print("end", repr(time.time()), flush=True)
print("---")
print(f"{'val_bpb:':<18}{float(os.environ.get('STANDIN_BPB', '1.25')):.6f}")
print(f"{'training_seconds:':<18}1.0")
'''
# Seconds allowed for cancelled processes to disappear (SIGTERM grace is 5 s).
GONE_S = 15.0


def job(tmp_path, n, **env) -> TrainJob:
    return TrainJob(n=n, files={"train.py": STANDIN, "prepare.py": "# stand-in\n"}, budget=5,
                    run_dir=str(tmp_path / "run"), timeout=120, env={k: str(v) for k, v in env.items()},
                    meta={"mine": n})


def field(res, name: str) -> str:
    return next(line.split(" ", 1)[1] for line in res.log_text().splitlines() if line.startswith(name + " "))


def span(res) -> tuple[float, float]:
    return float(field(res, "start")), float(field(res, "end"))


def overlap(a, b) -> bool:
    (s1, e1), (s2, e2) = span(a), span(b)
    return s1 < e2 and s2 < e1


def wait_pids(path: Path, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.1)
    return [int(x) for x in path.read_text().split()]


def all_gone(pids: list[int], timeout: float = GONE_S) -> bool:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# ---- LocalExecutor -------------------------------------------------------------------------------
def test_local_runs_two_at_once_with_a_gpu_per_slot(tmp_path):
    with LocalExecutor(2, gpus=["0", "1"], root=tmp_path / "slots") as ex:
        assert isinstance(ex, Executor) and ex.slots == 2
        ids = [ex.submit(job(tmp_path, n)) for n in (1, 2, 3)]
        assert ex.free_slots() == -1          # two running, one waiting
        res = wait(ex, ids, timeout=120)
    a, b, c = (res[i] for i in ids)
    assert all(r.ok for r in (a, b, c)), [r.log_tail for r in (a, b, c)]
    assert all(type(r) is RunResult for r in (a, b, c))   # the runner's own record, never converted
    assert a.summary["val_bpb"] == 1.25 and a.meta == {"mine": 1}
    assert overlap(a, b), (span(a), span(b))
    assert not overlap(a, c) or not overlap(b, c)       # the third waited for a free slot
    assert {field(a, "gpu"), field(b, "gpu")} == {"0", "1"}
    assert field(c, "gpu") == c.extra["gpu"] and c.extra["gpu"] in ("0", "1")
    for r in (a, b, c):   # the run happened in a slot folder, not the repo; log and model are in the run folder
        assert Path(field(r, "cwd")).parent == tmp_path / "slots"
        assert r.log_path == tmp_path / "run" / "logs" / f"exp-{r.n:04d}.log" and "val_bpb" in r.log_text()
        assert Path(r.artifact).read_bytes() == b"stand-in model"
        assert r.extra["clock"]["steps_seen"] == 1
    assert not list((tmp_path / "run").glob("child*.pid"))


def test_local_cancel_ends_the_whole_process_group(tmp_path):
    pids_file = tmp_path / "pids"
    with LocalExecutor(1, root=tmp_path / "slots") as ex:
        jid = ex.submit(job(tmp_path, 7, STANDIN_PIDS=pids_file))
        queued = ex.submit(job(tmp_path, 8))
        pids = wait_pids(pids_file)
        assert all(pid_alive(p) for p in pids)
        assert (tmp_path / "run" / "child-0.pid").exists()      # kill -9 recovery record of slot 0
        ex.cancel(queued)
        assert ex.poll(queued).crash_class == CANCELLED
        t0 = time.monotonic()
        ex.cancel(jid)
        res = ex.poll(jid)
        assert time.monotonic() - t0 < 10
    assert res is not None and res.cancelled and "cancelled" in res.log_tail
    assert all_gone(pids), "a process of the cancelled run is still alive"
    assert not (tmp_path / "run" / "child-0.pid").exists()


def test_a_driver_ended_by_ctrl_c_leaves_no_run_behind(tmp_path):
    """Ctrl-C in a driver that never calls close(): the executor's exit hook ends its runs."""
    import subprocess
    pids_file = tmp_path / "pids"
    driver = f"""
import sys, time
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from tests.test_executors import job
from executors import LocalExecutor
ex = LocalExecutor(1, root=Path({str(tmp_path / "slots")!r}))
ex.submit(job(Path({str(tmp_path)!r}), 1, STANDIN_PIDS={str(pids_file)!r}))
while not Path({str(pids_file)!r}).exists():
    time.sleep(0.05)
raise KeyboardInterrupt
"""
    p = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=120)
    assert "KeyboardInterrupt" in p.stderr
    pids = [int(x) for x in pids_file.read_text().split()]
    assert all_gone(pids), "a run outlived its driver"


def test_local_cancel_during_the_trusted_evaluation(tmp_path):
    """A cancel that comes while the evaluation's worker runs ends that worker's group too."""
    from harness.job import EvalSpec
    tj = job(tmp_path, 4, STANDIN_SLEEP=0.1)
    tj.evaluation = EvalSpec(prepare_source="")          # the worker starts (imports torch), then fails
    pid_file = tmp_path / "run" / ".verify" / "verify-0.pid"
    with LocalExecutor(1, root=tmp_path / "slots") as ex:
        jid = ex.submit(tj)
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert ex.poll(jid) is None and time.monotonic() < deadline, "the evaluation never started"
            time.sleep(0.02)
        pgid = json.loads(pid_file.read_text())["pgid"]
        ex.cancel(jid)
        res = ex.poll(jid)
    assert res.cancelled and res.verified is None
    assert all_gone([pgid]) and not pid_file.exists()


def test_kill_leftover_finds_every_slots_pid_files(tmp_path):
    """A loop killed with -9 leaves one record per slot (and the evaluation's in .verify/)."""
    import subprocess
    run_dir = tmp_path / "run"
    (run_dir / ".verify").mkdir(parents=True)
    procs = []
    for name in ("child-1.pid", ".verify/verify-0.pid"):
        p = subprocess.Popen(["sleep", "300"], cwd=run_dir, start_new_session=True)
        procs.append(p)
        (run_dir / name).write_text(json.dumps({"pgid": p.pid, "n": 1, "cwd": str(run_dir)}))
    note = runner.kill_leftover(run_dir)
    for p in procs:
        p.wait(10)
    assert note and note.count("killed leftover") == 2
    assert not (run_dir / "child-1.pid").exists() and not (run_dir / ".verify" / "verify-0.pid").exists()
    # and git never shows a slot's pid file as a change of the worktree
    assert all(any(fnmatch.fnmatch(name, pat) for pat in gitops.RUN_FILES) for name in ("child-3.pid", "verify-2.pid"))


# ---- RayExecutor -------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def ray_runtime():
    from executors.ray_exec import start_ray
    ray = pytest.importorskip("ray")
    started = start_ray(num_cpus=2)
    yield ray
    if started:
        ray.shutdown()


def test_ray_runs_two_at_once_from_materialised_files(ray_runtime, tmp_path):
    from executors.ray_exec import RayExecutor
    ex = RayExecutor(slots=2)
    assert isinstance(ex, Executor)
    try:
        ids = [ex.submit(job(tmp_path, n, STANDIN_BPB=1.0 + n / 10)) for n in (1, 2)]
        res = wait(ex, ids, timeout=180)
    finally:
        ex.close()
    a, b = (res[i] for i in ids)
    assert a.ok and b.ok, (a.log_text(), b.log_text())
    assert type(a) is RunResult and type(b) is RunResult   # the node's record itself, pickled whole
    assert (a.summary["val_bpb"], b.summary["val_bpb"]) == (1.1, 1.2)
    assert overlap(a, b), (span(a), span(b))
    for r in (a, b):
        cwd = Path(field(r, "cwd"))
        assert cwd.name == "src" and cwd.parent.name.startswith("autoresearch-job-")
        assert REPO not in cwd.parents and tmp_path not in cwd.parents
        assert not cwd.parent.exists()                       # the node's folder is gone
        local = tmp_path / "run" / "logs" / f"exp-{r.n:04d}.log"
        assert r.log_path == local and "val_bpb" in r.log_text()   # the node's log, written here
        assert Path(r.artifact).read_bytes() == b"stand-in model"   # fetched back from the node
        assert r.extra["node_ip"] and r.meta == {"mine": r.n}
        assert r.extra["python"] == sys.executable    # this venv: Ray built no second one (uv run)


def test_ray_cancel_leaves_no_process(ray_runtime, tmp_path):
    from executors.ray_exec import RayExecutor
    pids_file = tmp_path / "pids"
    ex = RayExecutor(slots=1)
    try:
        jid = ex.submit(job(tmp_path, 5, STANDIN_PIDS=pids_file))
        pids = wait_pids(pids_file, timeout=120)
        assert all(pid_alive(p) for p in pids) and ex.poll(jid) is None
        ex.cancel(jid)
        assert ex.poll(jid).cancelled
        assert all_gone(pids), "the training group outlived its cancelled Ray task"
        cwd = Path(f"/proc/{pids[0]}/cwd")
        assert not cwd.exists()
        # the executor stays usable after a cancel
        again = ex.submit(job(tmp_path, 6, STANDIN_SLEEP=0.1))
        assert wait(ex, [again], timeout=120)[again].ok
    finally:
        ex.close()


# ---- a real run with the trusted evaluation ------------------------------------------------------
def test_real_tiny_job_returns_a_trusted_val_bpb(tiny_cache, tmp_path):
    """One sealed tiny run of the real train.py (2 steps) and the trusted evaluation on its model,
    the pinned inputs checked first: what the loop's run + judge do, as one job."""
    import prepare
    from search import knobs
    train = knobs.set_knobs(knobs.for_profile((REPO / "train.py").read_text(), "tiny")[0], {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4,
                                                               "TOTAL_BATCH_SIZE": 256, "STARTUP_STEPS": 1})
    prep = (REPO / "prepare.py").read_text()
    run_dir = tmp_path / "run"
    view = DataView.from_describe(prepare.describe())
    eval_cache, inputs = pinned_inputs.pin(run_dir, view)      # what agent/workspace.make_seal does for a tag
    seal = pinned_inputs.Seal(sandbox=detect("auto"), data=view, eval_cache=eval_cache, inputs=inputs)
    box = seal.sandbox.kind            # sealed in bubblewrap where this machine can (as the loop does)
    tj = TrainJob(n=1, files={"train.py": train, "prepare.py": prep, **{f: (REPO / f).read_text() for f in FIXED_SOURCES[1:]}},
                  budget=2, run_dir=str(run_dir),
                  env={"AUTORESEARCH_STEPS": "2"}, seal=job_seal(seal, sealed=True, data_mode="train"),
                  evaluation=eval_spec(seal, prepare_source=prep, train_source=train, profile="tiny"))
    assert tj.evaluation.inputs == inputs and tj.evaluation.batch_size == eval_rows("tiny")
    with LocalExecutor(1, root=tmp_path / "slots") as ex:
        jid = ex.submit(tj)
        res = wait(ex, [jid], timeout=600)[jid]
    assert res.ok, res.log_tail
    v = res.verified
    assert v is not None and v.ok, v
    assert 0 < v.trusted_bpb < 20 and v.printed_bpb is None      # sealed: the evaluation is the figure
    assert res.summary["num_steps"] == 2 and res.sealed
    assert res.extra["sandbox"] == box
    assert not list((run_dir / ".verify").glob("verify*.pid"))


# ---- Hyperband on executors ----------------------------------------------------------------------
# A candidate that honours the step contract: its state file holds "<candidate>@<stable steps>",
# a resumed run checks it got its own state; val_bpb = Q + 1/steps (Q: the candidate's quality).
SWEEP_STANDIN = '''
import os
Q = {q}
steps, decay = int(os.environ["AUTORESEARCH_STEPS"]), int(os.environ.get("AUTORESEARCH_DECAY_STEPS") or 0)
resume, save = os.environ.get("AUTORESEARCH_RESUME_STATE"), os.environ.get("AUTORESEARCH_SAVE_STATE")
if resume:
    assert open(resume).read().startswith("{cid}@"), "resumed someone else's state"
    print("resumed", open(resume).read())
if save:
    with open(save, "w") as f:
        f.write("{cid}@" + str(steps - decay))
print("---")
print(f"{{'val_bpb:':<18}}{{Q + 1.0 / (steps - decay):.6f}}")
'''


def _sweep(ex, tmp_path):
    from search.executor_pool import ExecutorPool
    from search.hyperband import Candidate, hyperband_brackets, run_schedule
    qs = [0.9, 0.1, 0.5, 0.3, 0.8, 0.2, 0.7, 0.6, 0.4]    # c1 best, then c5, c3
    cands = []
    for i, q in enumerate(qs):
        src = tmp_path / f"c{i}.py"
        src.write_text(SWEEP_STANDIN.format(q=q, cid=f"c{i}"))
        cands.append(Candidate(f"c{i}", {"q": q}, src))
    with ExecutorPool(ex, prepare_source="# stand-in\n", run_dir=tmp_path / "sweep", threads=1) as pool:
        recs = run_schedule(pool, [hyperband_brackets(9, 1, 3)[0]], lambda i, b: cands, decay_steps=1,
                            ckpt_dir=tmp_path / "ck")
    assert all(r["val_bpb"] is not None for r in recs), [r["error"] for r in recs]
    assert sorted(r["cand"] for r in recs if r["rung"] == 1) == ["c1", "c3", "c5"]
    final = [r for r in recs if r["rung"] == 2]
    assert [r["cand"] for r in final] == ["c1"] and final[0]["val_bpb"] == pytest.approx(0.1 + 1 / 9)
    promoted = (tmp_path / "sweep" / "logs" / f"{final[0]['task']}.log").read_text()
    assert "resumed c1@3" in promoted                       # its state came back and went out again
    assert not any((tmp_path / "ck").glob("*.pt")) and not list((tmp_path / "sweep" / "artifacts").iterdir())
    return recs


def test_hyperband_runs_on_the_local_executor(tmp_path):
    with LocalExecutor(2, root=tmp_path / "slots") as ex:
        recs = _sweep(ex, tmp_path)
    assert len(recs) == 9 + 3 + 1


def test_hyperband_runs_on_ray(ray_runtime, tmp_path):
    from executors.ray_exec import RayExecutor
    ex = RayExecutor(slots=2)
    try:
        recs = _sweep(ex, tmp_path)      # the schedule's own checks, then the same count as locally
    finally:
        ex.close()
    assert len(recs) == 9 + 3 + 1 and all(r["error"] is None for r in recs)


# ---- the pinned inputs, checked where the evaluation runs -----------------------------------------
def _inputs(tmp_path):
    shared = tmp_path / "shared"
    (shared / "data").mkdir(parents=True)
    (shared / "data" / "val.parquet").write_bytes(b"validation tokens")
    return shared, {"data/val.parquet": pinned_inputs.file_sha256(shared / "data" / "val.parquet")}


def test_tampered_pinned_inputs_fail_the_evaluation_and_are_restored(tmp_path):
    from harness.job import EvalSpec
    shared, inputs = _inputs(tmp_path)
    run_dir = tmp_path / "run"
    pinned_inputs._copy_pinned(shared, run_dir / ".sealed" / "cache", inputs)
    target = run_dir / ".sealed" / "cache" / "data" / "val.parquet"
    target.chmod(0o644)
    target.write_bytes(b"forged")
    tj = job(tmp_path, 1, STANDIN_SLEEP=0.1)
    tj.evaluation = EvalSpec(prepare_source="", inputs=inputs, eval_cache=str(target.parents[1]),
                             data_cache=str(shared))
    with LocalExecutor(1, root=tmp_path / "slots") as ex:
        jid = ex.submit(tj)
        res = wait(ex, [jid], timeout=120)[jid]
    v = res.verified
    assert res.ok and v is not None and not v.ok
    assert "the evaluation inputs changed (data/val.parquet changed)" in v.reason
    assert v.printed_bpb == 1.25 and v.details["repaired"]
    assert target.read_bytes() == b"validation tokens"          # restored for the next experiment


def test_a_node_without_the_pinned_copy_pins_its_own_after_checking(tmp_path, monkeypatch):
    from harness import job as node
    from harness.job import EvalSpec
    monkeypatch.setattr(node, "NODE_PIN_ROOT", tmp_path / "node-pins")
    shared, inputs = _inputs(tmp_path)
    spec = EvalSpec(prepare_source="", inputs=inputs, eval_cache=str(tmp_path / "not-on-this-node"),
                    data_cache=str(shared))
    cache, problem = node._eval_cache(spec, None)
    assert problem is None and (cache / "data" / "val.parquet").read_bytes() == b"validation tokens"
    assert (tmp_path / "node-pins") in cache.parents
    (shared / "data" / "val.parquet").write_bytes(b"other data on this node")
    spec.inputs = {"data/val.parquet": "0" * 64}
    cache, problem = node._eval_cache(spec, None)
    assert cache is None and not problem.ok and "not what the tag was measured on" in problem.reason
