"""The trusted metric: re-evaluate a run's saved model in a separate, isolated process.

train.py prints its own val_bpb, and train.py is written by the proposer, so that number is a
claim. The runner sets AUTORESEARCH_ARTIFACT; train.py saves {"config", "state_dict",
"train_py_sha"} there. `verify()` copies a pristine prepare.py and the *committed* train.py into a
fresh folder, starts `python -I harness/verify_worker.py` there (isolated mode: no user site, no
PYTHON* variables, no script folder on sys.path), and reads back:

- trusted_bpb: prepare.evaluate_bpb on the saved weights, model fed a copy of the tokens and
  asked for logits only;
- a causality probe (future tokens and other rows must not move earlier logits);
- whether evaluation-relevant functions were replaced while train.py was imported or ran;
- whether the artifact's train_py_sha is the committed file's.

`VerifyResult.ok` is False on any disagreement; `.reason` says which. Cost: one extra evaluation
plus process start and model build; `.seconds` reports it (see the final report / journal).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.knobs import read_knobs
from harness.runner import kill_group
from harness.sandbox import DataView, Sandbox, scrub_env

WORKER = Path(__file__).with_name("verify_worker.py")
# The worker's process group while it runs, in the run folder (next to the runner's child.pid).
VERIFY_PID_FILE = "verify.pid"
# The printed val_bpb may differ from the trusted one by this much (absolute, or relative to the
# value, whichever is larger) before we call it a disagreement. The keep decision always uses the
# trusted value, so this only has to separate rounding and kernel differences (fused attention in
# the run vs SDPA here, bf16) from a claim that is simply wrong.
ABS_TOL = 0.005
REL_TOL = 0.005
# Seconds the worker may take (import torch + build + one evaluation + probe); generous on CPU.
DEFAULT_TIMEOUT_S = 900
# Lines of the worker's output kept in the result when it fails.
TAIL_CHARS = 3000
# Most rows per evaluation batch on a GPU. The re-evaluation runs eagerly (train.py's own eval is
# compiled, which fuses the logit softcap), so its logit intermediates are several full copies of
# [B, T, V]; a divisor of the run's batch covers exactly the same validation tokens.
GPU_MAX_ROWS = 32


@dataclass
class VerifyResult:
    ok: bool
    reason: str
    trusted_bpb: float | None = None
    printed_bpb: float | None = None
    causal: bool | None = None
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "trusted_bpb": self.trusted_bpb,
                "printed_bpb": self.printed_bpb, "causal": self.causal,
                "seconds": round(self.seconds, 3), "details": self.details}


def batch_size_for(train_source: str, profile: str) -> int:
    """The batch train.py evaluates with (DEVICE_BATCH_SIZE, times GPU_BATCH_MULT on gpu), or on a
    GPU its largest divisor <= GPU_MAX_ROWS: same tokens, bounded memory."""
    k = read_knobs(train_source)
    rows = int(k["DEVICE_BATCH_SIZE"].value) if "DEVICE_BATCH_SIZE" in k else 8
    if profile == "gpu":
        rows *= int(k["GPU_BATCH_MULT"].value) if "GPU_BATCH_MULT" in k else 1
        rows = max(d for d in range(1, min(rows, GPU_MAX_ROWS) + 1) if rows % d == 0)
    return max(1, rows)


def tolerance(bpb: float) -> float:
    return max(ABS_TOL, REL_TOL * abs(bpb))


def verify(artifact, *, train_source: str, prepare_source: str, printed_bpb: float | None,
           batch_size: int = 8, env: dict | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
           python: str | None = None, sandbox: Sandbox | None = None, eval_cache: Path | None = None,
           work_root: Path | None = None, sealed: bool = False,
           pid_name: str = VERIFY_PID_FILE) -> VerifyResult:
    """Re-evaluate `artifact` with `train_source`'s build_model and `prepare_source`'s evaluation.

    eval_cache: the pinned copy of the evaluation inputs (harness/pinned.py), read through
    AUTORESEARCH_CACHE; sandbox: the worker imports train.py, so it runs sealed too (no network,
    nothing writable but its own folder, only the pinned inputs and the artifact visible).
    work_root: where the worker's folder goes (the run folder's .verify/), with verify.pid, so a
    loop killed mid-evaluation leaves nothing that --resume cannot end and remove.
    sealed: train.py printed no val_bpb (loop mode): this evaluation is the only figure.
    pid_name: the pid file's name in work_root (verify-K.pid for executor slot K).
    """
    t0 = time.time()
    artifact = Path(artifact) if artifact else None
    if artifact is None or not artifact.is_file():
        return VerifyResult(False, f"no model artifact at {artifact}: train.py did not save one "
                                   "(AUTORESEARCH_ARTIFACT), so its val_bpb cannot be verified",
                            printed_bpb=printed_bpb, seconds=time.time() - t0)
    if work_root is not None:
        Path(work_root).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="verify-", dir=work_root))
    try:
        (work / "prepare.py").write_text(prepare_source)
        (work / "train.py").write_text(train_source)
        spec = {"dir": str(work), "artifact": str(artifact.resolve()), "out": str(work / "result.json"),
                "batch_size": int(batch_size)}
        (work / "spec.json").write_text(json.dumps(spec))
        # The worker script is copied too, so the process never runs code from a folder train.py
        # could have written to.
        shutil.copy(WORKER, work / "verify_worker.py")
        child_env = dict(os.environ if env is None else env)
        child_env.pop("AUTORESEARCH_SEALED", None)
        if eval_cache is not None:
            child_env["AUTORESEARCH_CACHE"] = str(eval_cache)
        argv = [python or sys.executable, "-I", str(work / "verify_worker.py"), str(work / "spec.json")]
        if sandbox is not None and sandbox.sealed:
            child_env = scrub_env(child_env)
            child_env["TMPDIR"] = "/tmp"
            view = DataView(cache=Path(env_cache(env)))
            argv = sandbox.wrap(argv, cwd=work, writable=[work], data=view, data_mode="eval",
                                run_dir=_run_dir_of(work_root),
                                readonly=[p for p in (eval_cache, artifact) if p is not None])
        code, tail, timed_out = _run_group(argv, work, child_env, timeout_s, work_root, pid_name)
        if timed_out:
            return VerifyResult(False, f"trusted re-evaluation timed out after {timeout_s:.0f}s",
                                printed_bpb=printed_bpb, seconds=time.time() - t0)
        try:
            out = json.loads((work / "result.json").read_text())
        except (OSError, json.JSONDecodeError):
            return VerifyResult(False, f"trusted re-evaluation died (exit {code}) without a "
                                       f"result: {tail[-300:]}", printed_bpb=printed_bpb,
                                seconds=time.time() - t0, details={"log_tail": tail})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return judge_worker_output(out, printed_bpb, time.time() - t0, sealed=sealed)


def env_cache(env: dict | None) -> str:
    e = os.environ if env is None else env
    return e.get("AUTORESEARCH_CACHE") or str(Path.home() / ".cache" / "autoresearch")


def _run_dir_of(work_root: Path | None) -> Path | None:
    """The run folder a worker folder lives in (run_dir/.verify), for the sandbox's view."""
    return Path(work_root).resolve().parent if work_root is not None else None


def _run_group(argv, cwd: Path, env: dict, timeout_s: float, pid_dir: Path | None,
               pid_name: str = VERIFY_PID_FILE):
    """Run the worker in its own process group, recorded in pid_dir/verify.pid while it runs;
    returns (exit code, output tail, timed out)."""
    log = cwd / "worker.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        pid_file = Path(pid_dir) / pid_name if pid_dir is not None else None
        if pid_file is not None:
            pid_file.write_text(json.dumps({"pgid": proc.pid, "cwd": str(cwd), "started_at": time.time(),
                                            "n": "verify"}))
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_group(proc.pid, proc)
            proc.wait()
            if pid_file is not None:
                pid_file.unlink(missing_ok=True)
    tail = log.read_text(errors="replace")[-TAIL_CHARS:]
    return proc.returncode, tail, timed_out


def judge_worker_output(out: dict, printed_bpb: float | None, seconds: float, sealed: bool = False) -> VerifyResult:
    """Turn the worker's JSON into a verdict: every check must pass."""
    details = {k: out.get(k) for k in ("timings", "probe", "patched", "patched_at_import", "sha_match",
                                       "stage", "error")}
    trusted = out.get("trusted_bpb")
    probe = out.get("probe") or {}
    causal = probe.get("causal") if probe else None
    r = VerifyResult(False, "", trusted, printed_bpb, causal, seconds, details)
    if not out.get("ok"):
        r.reason = f"trusted re-evaluation failed at {out.get('stage')}: {out.get('error')}"
        return r
    if out.get("patched_at_import") or out.get("patched"):
        names = out.get("patched_at_import") or out.get("patched")
        r.reason = f"train.py replaced functions the evaluation relies on: {', '.join(names[:8])}"
        return r
    if not out.get("sha_match"):
        r.reason = "the artifact's train_py_sha is not the committed train.py: the run used other code"
        return r
    if trusted is None or not math.isfinite(trusted):
        r.reason = f"trusted val_bpb is {trusted}"
        return r
    if not causal:
        r.reason = (f"causality probe failed: changing tokens at positions >= {probe.get('at')} moved earlier "
                    f"logits by {probe.get('max_future_leak'):.3g} (other rows: "
                    f"{probe.get('max_cross_row_leak'):.3g}; limit {probe.get('limit'):.3g})")
        return r
    if sealed:   # loop mode: nothing printed to compare; this evaluation is the result
        r.ok = True
        r.reason = f"trusted val_bpb {trusted:.6f} (sealed run: the only evaluation), causal, {seconds:.1f}s"
        return r
    if printed_bpb is None or not math.isfinite(printed_bpb):
        r.reason = f"printed val_bpb is {printed_bpb}; trusted is {trusted:.6f}"
        return r
    gap = abs(printed_bpb - trusted)
    if gap > tolerance(trusted):
        r.reason = (f"printed val_bpb {printed_bpb:.6f} disagrees with the trusted re-evaluation "
                    f"{trusted:.6f} (gap {gap:.6f} > tolerance {tolerance(trusted):.6f})")
        return r
    r.ok = True
    r.reason = (f"verified: trusted val_bpb {trusted:.6f} (printed {printed_bpb:.6f}), causal, "
                f"{seconds:.1f}s")
    return r
