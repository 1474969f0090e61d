"""
The one device command: what the loop's recipe gets out of a GPU, in one call under a hard deadline.

    python3 scripts/gpu_check.py [--deadline 480] [--out DIR] [--budget 20]   # on a GPU machine
    uv run scripts/gpu_check.py --smoke --out DIR                            # every step, CPU, tiny

Plain python3 is enough (torch, numpy, pyarrow, tiktoken): no uv, no network. Data comes from
`.device-carry/cache` when it exists (built by scripts/build_device_carry.py), else from
$AUTORESEARCH_CACHE, else it is prepared offline. Steps run in the order of what they answer:

    env          device, sm_XY, versions, the cascade (and why a backend is skipped), ptxas, a bf16 GEMM peak
    data         the data cache in use
    recipe       train.py as the loop runs it (harness.runner.run_train) + the trusted evaluation:
                 val_bpb, startup, compile, steady ms/step, tok/s, MFU, post, verify seconds, duty cycle
                 of a 300 s experiment; it also writes the trusted compile cache (harness/compiled.py)
    graph        the recorded graph replayed on the device: run-to-run and prefix (causality) bitwise
    recipe-warm  the same run again, reading that cache as every loop run does: warm startup
    fallback     a few steps with compile forced to fail (a ptxas / C++ compiler that is /bin/false)
    attn:*, model:*  per attention backend, with what time is left

Each step is a subprocess in its own process group, with its own timeout (the smaller of its limit
and the time left); whatever it starts (train.py, the evaluator) stays in that group or is
recorded in a pid file, and is ended with it. A step writes its partial result to
OUT/steps/<name>.json as it goes and train.py's log streams into OUT/<label>.log, so a step that
is killed (or a check that is killed) leaves what it had measured. One JSON line per finished
step in OUT/results.jsonl; everything printed also goes to OUT/gpu_check.log. See docs/gpu.md.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
CARRY = REPO / ".device-carry"  # built by scripts/build_device_carry.py; git-ignored
DEFAULT_DEADLINE = 480  # seconds: the whole check fits 8 minutes of one 10-minute device call
FINAL_RESERVE = 5  # seconds kept back at the end for writing the summary
RECIPE_BUDGET = 20  # training seconds of the recipe run: enough for steady steps after compile
SMOKE_RECIPE_BUDGET = 2
TERM_GRACE_S = 5  # a killed step gets this long after SIGTERM (to end what it started) before SIGKILL

# (name, seconds it needs at least to start, seconds it may take at most) on an H100-class GPU
# (estimates: docs/gpu.md's budget table). The smoke run on CPU uses the same order and limits and
# needs SMOKE_NEED seconds to start a step.
STEPS = [("env", 10, 60), ("data", 5, 120),
         ("recipe", 120, 300), ("graph", 15, 60), ("recipe-warm", 80, 240), ("fallback", 40, 150),
         ("attn:fa3", 10, 90), ("attn:flex", 20, 150), ("attn:sdpa", 15, 120),
         ("model:fa3", 45, 150), ("model:flex", 45, 150), ("model:sdpa", 40, 150),
         ("attn:naive", 10, 60), ("model:naive", 30, 120)]
SMOKE_NEED = 1


class Tee:
    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            sys.stdout.write(text)
            sys.stdout.flush()
            self.file.write(text)


def child_env(args, data_cache, scratch):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               TORCHINDUCTOR_CACHE_DIR=str(Path(scratch) / "inductor-steps"))  # the attn/model steps' own
    paths = [str(REPO)] + ([str(CARRY / "site")] if (CARRY / "site").is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env["AUTORESEARCH_PROFILE"] = "tiny" if args.smoke else "gpu"
    env["AUTORESEARCH_CACHE"] = str(data_cache)
    if args.smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the smoke run is the CPU path, even on a GPU machine
        env.setdefault("AUTORESEARCH_THREADS", "1")  # CI machines are small and shared
    return env


def pick_data_cache(args, scratch):
    """The carried cache on a device, the caller's prepared cache, else a fresh one (prepared by
    the data step)."""
    profile = "tiny" if args.smoke else "gpu"
    for cache in ([] if args.smoke else [CARRY / "cache"]) + [os.environ.get("AUTORESEARCH_CACHE")]:
        if cache and (Path(cache) / f"prepared-{profile}.json").exists():
            return Path(cache)
    return Path(scratch) / "cache"


def end_leftovers(scratch):
    """Groups a step recorded (the trusted evaluator's, in a tag's .verify/) and left behind."""
    from harness.procs import kill_leftover
    for run_dir in Path(scratch).glob("tag*"):
        note = kill_leftover(run_dir)
        if note:
            print(f"gpu_check: {note}")


def run_step(name, spec, env, timeout, tee):
    """One step in its own process group; (status, result, seconds). A step that runs over is
    sent SIGTERM (it ends what it started), then SIGKILL, and its partial result is kept."""
    spec_path = Path(spec["scratch"]) / f"{name.replace(':', '_')}.spec.json"
    spec_path.write_text(json.dumps(dict(spec, step=name)))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--run-step", str(spec_path)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace")

    def pump():
        for line in proc.stdout:
            tee.write(f"  [{name}] {line}")
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, wait in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left in the step's group
    except ProcessLookupError:
        pass
    end_leftovers(spec["scratch"])
    reader.join(timeout=5)
    seconds = time.monotonic() - t0
    import gpu_steps
    result = gpu_steps.read_partial(spec["out"], name)
    if timed_out:
        return "timeout", dict(result, reason=f"killed after {timeout:.0f}s (its timeout)"), seconds
    if proc.returncode != 0 or not result.get("done"):
        reason = result.get("error") or f"exit code {proc.returncode} without a result"
        return "failed", dict(result, reason=reason), seconds
    return "ok", result, seconds


def run_inline(name, spec, env, tee):
    """--inline (the CI smoke test): the step in this process, so a 2-core runner does not pay a
    torch import per step. No timeout is enforced; the device run never uses this."""
    import gpu_steps
    saved = dict(os.environ)
    os.environ.update(env)
    t0 = time.monotonic()
    try:
        if "prepare" in sys.modules:  # it reads the profile, cache and pointer at import
            import importlib
            importlib.reload(sys.modules["prepare"])
        code = gpu_steps.run(dict(spec, step=name), watch_parent=False)
        result = gpu_steps.read_partial(spec["out"], name)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for line in json.dumps(result, default=str, indent=1).splitlines():
        tee.write(f"  [{name}] {line}\n")
    if code != 0:
        return "failed", dict(result, reason=result.get("error", "failed")), time.monotonic() - t0
    return "ok", result, time.monotonic() - t0


def skip_reason(name, done, smoke):
    """Steps that have nothing to measure, given what ran before."""
    kind, _, backend = name.partition(":")
    if kind == "model" and backend:
        attn = done.get(f"attn:{backend}", {})
        if attn.get("status") != "ok":
            return f"attn:{backend} did not finish ({attn.get('status', 'not run')})"
        if not attn["result"].get("usable"):
            return f"{backend} is not usable here: {attn['result'].get('reason')}"
        if backend == "naive" and not smoke:
            return "naive materialises [B, H, T, T] scores per layer: at the training shape that is tens of GB"
    if name in ("graph", "recipe-warm") and not done.get("recipe", {}).get("result", {}).get("artifact"):
        return "the recipe step left no model"
    return None


def main_parent(args):
    out = Path(args.out or os.environ.get("OUT") or "out").resolve()
    (out / "steps").mkdir(parents=True, exist_ok=True)
    tee = Tee(out / "gpu_check.log")
    results = out / "results.jsonl"
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="gpu_check-")
    data_cache = pick_data_cache(args, scratch)
    env = child_env(args, data_cache, scratch)
    commit = git_commit()
    tee.write(f"gpu_check {'--smoke ' if args.smoke else ''}deadline {args.deadline}s, out {out}, "
              f"data cache {data_cache}, python {sys.version.split()[0]}, commit {commit}\n")
    done = {}
    spec = {"smoke": args.smoke, "budget": args.budget, "out": str(out), "scratch": scratch}
    try:
        for name, need, most in STEPS:
            if args.steps and name not in args.steps:
                continue
            need = SMOKE_NEED if args.smoke else need
            left = args.deadline - (time.monotonic() - start) - FINAL_RESERVE
            reason = skip_reason(name, done, args.smoke)
            if reason is None and left < need:
                reason = f"needs ~{need}s, {max(0, left):.0f}s left before the deadline"
            started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            if reason:
                status, result, seconds = "skipped", {"reason": reason}, 0.0
            else:
                tee.write(f"== {name} (timeout {min(most, left):.0f}s)\n")
                spec["earlier"] = {n: d["result"] for n, d in done.items() if d["status"] != "skipped"}
                if args.inline:
                    status, result, seconds = run_inline(name, spec, env, tee)
                else:
                    status, result, seconds = run_step(name, spec, env, min(most, left), tee)
            done[name] = {"status": status, "result": result}
            line = {"step": name, "status": status, "seconds": round(seconds, 2), "started_at": started,
                    "commit": commit, **result}
            with open(results, "a") as f:
                f.write(json.dumps(line, default=str) + "\n")
            note = result.get("reason")
            if status == "ok" and result.get("usable") is False:
                note = f"{name.partition(':')[2]} is not usable here: {note}"
            tee.write(f"-- {name}: {status} in {seconds:.1f}s{': ' + str(note) if note else ''}\n")
    finally:
        end_leftovers(scratch)
        shutil.rmtree(scratch, ignore_errors=True)  # the recipe runs' artifacts and caches
    tee.write(f"done in {time.monotonic() - start:.1f}s; one line per step in {results}\n")
    bad = [n for n, d in done.items() if d["status"] in ("failed", "timeout")]
    return 1 if bad else 0


def git_commit():
    """This checkout's commit; on a device the tree travels without .git, so the carry's manifest
    (written when the carry was built) says which commit it was built at."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    if commit:
        return commit
    try:
        return json.loads((CARRY / "manifest.json").read_text())["commit"] + " (from the carry manifest)"
    except (OSError, ValueError, KeyError):
        return "unknown (no git, no carry manifest)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0], allow_abbrev=False)
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE, help="hard limit for the whole check, seconds")
    parser.add_argument("--out", help="results folder (default $OUT, else ./out)")
    parser.add_argument("--budget", type=float, default=RECIPE_BUDGET, help="training seconds of the recipe run")
    parser.add_argument("--smoke", action="store_true", help="every step on CPU at the tiny profile's shapes")
    parser.add_argument("--steps", nargs="*", help="run only these steps (names as in results.jsonl)")
    parser.add_argument("--inline", action="store_true",
                        help="run the steps in this process (CI smoke test only: no per-step timeout)")
    parser.add_argument("--run-step", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_step:
        import gpu_steps
        spec = json.loads(Path(args.run_step).read_text())
        return gpu_steps.run(spec)
    if args.smoke:
        args.budget = SMOKE_RECIPE_BUDGET if args.budget == RECIPE_BUDGET else args.budget
    return main_parent(args)


if __name__ == "__main__":
    sys.exit(main())
