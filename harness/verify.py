"""The trusted metric: evaluate a run's saved model as data, in a clean process that runs none of its code.

train.py is written by the proposer, so anything it computes is a claim. In loop mode it saves
its model with runtime.save_model: the weights and the forward pass as recorded aten operators.
`verify()` copies six trusted files into a fresh folder (harness/eval_worker.py,
harness/replay.py, harness/graph.py, harness/graph_ops.py, harness/graph_calls.py, and prepare.py
as committed at the tag's base), starts `python -I eval_worker.py` there in a sandbox that sees that folder, the
pinned evaluation inputs and the artifact (nothing writable); the worker runs the graph in replay
processes of its own that never see the data (harness/replay.py). The verdict comes back from the
worker's stdout pipe:

- trusted_bpb: prepare.evaluate_bpb on the replayed graph (the fixed metric);
- causality on the evaluation's own data (rows' futures replaced by other validation text);
- the serving figures of the graph (KV bytes and decode FLOPs per token);
- whether the artifact's train_py_sha is the committed file's.

`VerifyResult.ok` is False on any failure; `.reason` says which. Nothing of train.py is imported
here or there: a train.py that patches json, builtins or prepare at import time patches a
process the verdict never passes through. Cost: one process start, one evaluation (+1/4 for the
causality check); `.seconds` reports it (journal: verify_seconds).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.procs import kill_group
from harness.sandbox import Sandbox, View, detect, gpus_of
from harness.sandbox import DataView

HERE = Path(__file__).parent
WORKER_FILES = (HERE / "eval_worker.py", HERE / "replay.py", HERE / "graph.py", HERE / "graph_ops.py",
                HERE / "graph_calls.py")
# The worker's process group while it runs, in the run folder (next to the runner's child.pid).
VERIFY_PID_FILE = "verify.pid"
# The printed val_bpb may differ from the trusted one by this much (absolute, or relative to the
# value, whichever is larger) before we call it a disagreement (unsealed runs only: a sealed run
# prints none). The decision always uses the trusted value.
ABS_TOL = 0.005
REL_TOL = 0.005
# Seconds the worker may take (import torch + load + one evaluation + the check); generous on CPU.
DEFAULT_TIMEOUT_S = 900
# Characters of the worker's stderr kept in the result when it fails; its verdict line's limit.
TAIL_CHARS = 3000
MAX_VERDICT_BYTES = 1 << 20
# Rows of the evaluation batch per profile: the graph is recorded at [rows, MAX_SEQ_LEN] and the
# evaluation reads rows x MAX_SEQ_LEN tokens per step whatever train.py's own batch is. On a GPU
# the reference's 128 rows would hold several copies of [B, T, V] logits; 32 covers the same tokens.
EVAL_ROWS = {"gpu": 32, "cpu": 8, "tiny": 8}
# Tokens of a proxy evaluation (screening) at most: a screen ranks candidates, it does not measure them.
PROXY_EVAL_TOKENS_MAX = 2 * 524288


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

    @classmethod
    def from_dict(cls, d: dict) -> "VerifyResult":
        """What as_dict() wrote (a remote job's evaluation, harness/job.py)."""
        return cls(ok=d["ok"], reason=d["reason"], trusted_bpb=d.get("trusted_bpb"), printed_bpb=d.get("printed_bpb"),
                   causal=d.get("causal"), seconds=d.get("seconds") or 0.0, details=d.get("details") or {})

    @property
    def serving(self) -> dict | None:
        """The graph's serving figures (KV bytes and decode FLOPs per token), None without them."""
        v = self.details.get("serving") if isinstance(self.details, dict) else None
        return v if isinstance(v, dict) else None

    @property
    def pinned_error(self) -> str | None:
        """Why the pinned evaluation inputs could not be restored where the job ran (node.py)."""
        v = self.details.get("pinned_error") if isinstance(self.details, dict) else None
        return v if isinstance(v, str) and v else None


def eval_rows(profile: str | None) -> int:
    return EVAL_ROWS.get(profile or "", EVAL_ROWS["cpu"])


def tolerance(bpb: float) -> float:
    return max(ABS_TOL, REL_TOL * abs(bpb))


def source_sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass
class Evaluation:
    """What one trusted evaluation measures: the model a run of `train_source` saved (the source is
    hashed only, compared with the artifact's claim), with `prepare_source`'s evaluation on
    `rows`-row batches, over `eval_tokens` (fewer than the profile's EVAL_TOKENS: a proxy
    evaluation; None: all of them) of the pinned inputs at `eval_cache` (the run folder's pinned
    copy, read through AUTORESEARCH_CACHE; None: the data cache itself, read-only: a tool, a test).
    printed_bpb: what train.py printed (an unsealed run), compared; sealed: it printed nothing
    (loop mode), so this evaluation is the only figure."""
    train_source: str
    prepare_source: str
    rows: int
    printed_bpb: float | None = None
    sealed: bool = False
    eval_tokens: int | None = None
    eval_cache: Path | None = None


@dataclass
class EvalPlace:
    """Where the evaluator runs: inside `sandbox` (default detect("auto"); kind none runs it
    unsandboxed) with `env` (default this process's) and `python`, its folder under `work_root`
    (the run folder's .verify/) with its pid file `pid_name`, so a loop killed mid-evaluation leaves
    nothing that --resume cannot end and remove; ended after `timeout_s`."""
    sandbox: Sandbox | None = None
    env: dict | None = None
    python: str | None = None
    work_root: Path | None = None
    pid_name: str = VERIFY_PID_FILE
    timeout_s: float = DEFAULT_TIMEOUT_S


def verify(artifact, what: Evaluation, where: EvalPlace | None = None) -> VerifyResult:
    """Evaluate `artifact` (runtime.save_model's file) as `what` says, where `where` says."""
    where = where or EvalPlace()
    printed_bpb, eval_cache, timeout_s = what.printed_bpb, what.eval_cache, where.timeout_s
    t0 = time.time()
    artifact = Path(artifact) if artifact else None
    if artifact is None or not artifact.is_file():
        return VerifyResult(False, f"no model artifact at {artifact}: train.py did not save one "
                                   "(AUTORESEARCH_ARTIFACT), so it cannot be evaluated",
                            printed_bpb=printed_bpb, seconds=time.time() - t0)
    if artifact.is_symlink() or artifact.resolve().parent != artifact.parent.resolve():
        # a link is followed out here, outside the sandbox: the run would have another file (an
        # earlier experiment's over-trained model) evaluated as its own
        return VerifyResult(False, f"the model artifact {artifact} is a link ({os.path.realpath(artifact)}): "
                                   "a run must write its own model file", printed_bpb=printed_bpb,
                            seconds=time.time() - t0)
    if where.work_root is not None:
        Path(where.work_root).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="verify-", dir=where.work_root))
    box = where.sandbox if where.sandbox is not None else detect("auto")
    try:
        (work / "prepare.py").write_text(what.prepare_source)
        for f in WORKER_FILES:       # never run from a folder train.py could have written to
            shutil.copy(f, work / f.name)
        spec = {"dir": str(work), "artifact": str(artifact.resolve()), "rows": int(what.rows),
                "train_sha": source_sha(what.train_source), "eval_tokens": what.eval_tokens}
        (work / "spec.json").write_text(json.dumps(spec))
        child_env = dict(os.environ if where.env is None else where.env)
        child_env.pop("AUTORESEARCH_SEALED", None)
        if eval_cache is None:      # no pinned copy (a tool, a test): the data cache itself, read-only
            eval_cache = Path(child_env.get("AUTORESEARCH_CACHE") or Path.home() / ".cache" / "autoresearch")
        child_env["AUTORESEARCH_CACHE"] = str(Path(eval_cache).resolve())
        argv = [where.python or sys.executable, "-I", str(work / "eval_worker.py"), str(work / "spec.json")]
        view = View(cwd=work, readonly=[p for p in (eval_cache, artifact) if p is not None],
                    gpus=gpus_of(child_env))
        code, verdict, tail, timed_out = _run_group(box, argv, view, child_env, timeout_s, work,
                                                    where.work_root, where.pid_name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if timed_out:
        return VerifyResult(False, f"trusted evaluation timed out after {timeout_s:.0f}s",
                            printed_bpb=printed_bpb, seconds=time.time() - t0)
    try:
        out = json.loads(verdict.strip().splitlines()[-1])
        if not isinstance(out, dict):
            raise ValueError("not an object")
    except (ValueError, IndexError):
        return VerifyResult(False, f"trusted evaluation died (exit {code}) without a verdict: {tail[-300:]}",
                            printed_bpb=printed_bpb, seconds=time.time() - t0, details={"log_tail": tail})
    return judge_worker_output(out, printed_bpb, time.time() - t0, sealed=what.sealed)


def _run_group(box: Sandbox, argv, view: View, env: dict, timeout_s: float, cwd: Path,
               pid_dir: Path | None, pid_name: str):
    """Run the worker in its own process group (recorded in pid_dir/pid_name while it runs);
    returns (exit code, its stdout (the verdict), its stderr's tail, timed out)."""
    err_path = cwd / "worker.err"
    with open(err_path, "wb") as err:
        proc = box.popen(argv, view, env, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                         start_new_session=True)
        pid_file = Path(pid_dir) / pid_name if pid_dir is not None else None
        if pid_file is not None:
            pid_file.write_text(json.dumps({"pgid": proc.pid, "cwd": str(cwd), "started_at": time.time(),
                                            "n": "verify"}))
        chunks, size, timed_out = [], 0, False
        deadline = time.monotonic() + timeout_s
        try:
            while True:                    # read the pipe as it fills, bounded
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
                if ready:
                    data = proc.stdout.read1(65536)
                    if not data:
                        break
                    if size < MAX_VERDICT_BYTES:
                        chunks.append(data[:MAX_VERDICT_BYTES - size])
                        size += len(data)
            if not timed_out:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_group(proc.pid, proc)
            proc.wait()
            proc.stdout.close()
            if pid_file is not None:
                pid_file.unlink(missing_ok=True)
    tail = err_path.read_text(errors="replace")[-TAIL_CHARS:]
    return proc.returncode, b"".join(chunks).decode(errors="replace"), tail, timed_out


def _check_figures(check: dict) -> str:
    """Why the worker's causality figures do not show a pass ('' when they do): written so that a
    missing, non-numeric or NaN figure fails."""
    nums = {k: check.get(k) for k in ("max_leak", "limit", "splice_excess", "splice_limit")}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in nums.values()):
        return ", ".join(f"{k} {v!r}" for k, v in nums.items()) + " are not all finite numbers"
    if not (nums["max_leak"] <= nums["limit"]):
        return f"max_leak {nums['max_leak']} is above the limit {nums['limit']}"
    if not (nums["splice_excess"] <= nums["splice_limit"]):
        return f"splice_excess {nums['splice_excess']} is above the limit {nums['splice_limit']}"
    rows = check.get("checked_rows")
    if not (isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1):
        return f"{rows!r} rows checked"
    return ""


def judge_worker_output(out: dict, printed_bpb: float | None, seconds: float, sealed: bool = False) -> VerifyResult:
    """Turn the worker's JSON into a verdict: every check must pass."""
    details = {k: out.get(k) for k in ("timings", "causality", "serving", "sha_match", "stage", "error")}
    trusted = out.get("trusted_bpb")
    if not isinstance(trusted, (int, float)) or isinstance(trusted, bool):
        trusted = None
    check = out.get("causality")
    check = check if isinstance(check, dict) else {}
    causal = check.get("causal") if check else None
    r = VerifyResult(False, "", trusted, printed_bpb, causal, seconds, details)
    if out.get("ok") is not True:
        r.trusted_bpb = None
        error = str(out.get("error") or "")
        if check.get("failure"):
            what = "causality check" if check.get("failure_kind") == "causality" else "integrity check"
            r.reason = f"{what} failed: {check['failure']}"
        else:
            r.reason = f"trusted evaluation failed at {out.get('stage')}: {error}"
        return r
    if out.get("sha_match") is not True:
        r.reason = "the artifact's train_py_sha is not the committed train.py: the run used other code"
        return r
    if trusted is None or not math.isfinite(trusted):
        r.reason = f"trusted val_bpb is {trusted}"
        return r
    if causal is not True:
        r.reason = (f"causality check did not pass ({check.get('checked_batches', 0)} batches checked, "
                    f"largest change before a cut {check.get('max_leak')}, limit {check.get('limit')})")
        return r
    figures = _check_figures(check)
    if figures:
        r.causal = False
        r.reason = f"causality check's figures do not hold: {figures}"
        return r
    if sealed:   # loop mode: nothing printed to compare; this evaluation is the result
        r.ok = True
        r.reason = (f"trusted val_bpb {trusted:.6f} (sealed run: the only evaluation), causal on "
                    f"{check.get('checked_rows')} spliced rows, {seconds:.1f}s")
        return r
    if printed_bpb is None or not math.isfinite(printed_bpb):
        r.reason = f"printed val_bpb is {printed_bpb}; trusted is {trusted:.6f}"
        return r
    gap = abs(printed_bpb - trusted)
    if not (gap <= tolerance(trusted)):        # written so that NaN fails
        r.reason = (f"printed val_bpb {printed_bpb:.6f} disagrees with the trusted evaluation "
                    f"{trusted:.6f} (gap {gap:.6f} > tolerance {tolerance(trusted):.6f})")
        return r
    r.ok = True
    r.reason = (f"verified: trusted val_bpb {trusted:.6f} (printed {printed_bpb:.6f}), causal, "
                f"{seconds:.1f}s")
    return r


# ---- The pinned evaluation inputs: The evaluation's inputs, pinned by content: a private copy that only the trusted evaluator reads.
#
# The metric depends on the validation shard, the tokenizer (its files, token_bytes.pt) and the
# profile's pointer file that says which of them to use; prepare.py itself is pinned separately
# (the evaluator runs prepare.py as committed at the tag's base). At the tag's start `pin()` copies
# those files from the shared data cache into `<run>/.sealed/cache/` (same layout, so prepare.py
# finds them through AUTORESEARCH_CACHE) and records their SHA-256 in run.json ("inputs").
#
# Before every trusted evaluation `check()` hashes the pinned copy again. A mismatch (or a missing
# file) fails that experiment as an integrity failure and `repair()` restores the copy from the
# shared cache if the cache still matches the recorded hashes; if it does not, the tag cannot be
# measured any more and the loop stops with a message (re-prepare the data, or start a new tag).
# Nothing tampered is ever carried forward: the fingerprint is the content, not a cached claim.


PINNED_DIR = ".sealed"
CHUNK = 1 << 20


class PinnedError(RuntimeError):
    """The evaluation inputs can no longer be restored to what the tag was measured on."""


@dataclass
class Seal:
    """Everything a sealed run needs: the sandbox, the data view, the pinned inputs."""
    sandbox: Sandbox
    data: DataView | None = None
    eval_cache: Path | None = None
    inputs: dict = field(default_factory=dict)       # path relative to the cache -> sha256

    @property
    def sealed(self) -> bool:
        return self.sandbox.sealed


def input_files(view: DataView) -> list[Path]:
    """The files the metric depends on, absolute, under view.cache."""
    files = []
    if view.val is not None and view.val.is_file():
        files.append(view.val)
    if view.tokenizer is not None and view.tokenizer.is_dir():
        files += sorted(p for p in view.tokenizer.rglob("*") if p.is_file())
    if view.pointer is not None and view.pointer.is_file():
        files.append(view.pointer)
    return files


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def hash_inputs(view: DataView) -> dict:
    cache = view.cache.resolve()
    return {str(p.resolve().relative_to(cache)): file_sha256(p) for p in input_files(view)}


def pin(run_dir: Path, view: DataView) -> tuple[Path, dict]:
    """Copy the inputs into run_dir/.sealed/cache; returns (that cache, their hashes)."""
    target = Path(run_dir) / PINNED_DIR / "cache"
    hashes = hash_inputs(view)
    _copy_pinned(view.cache, target, hashes)
    if check_pinned(target, hashes):
        raise PinnedError(f"the data cache {view.cache} changed while it was being pinned; try again")
    return target, hashes


def _copy_pinned(cache: Path, target: Path, hashes: dict) -> None:
    for rel in hashes:
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copyfile(cache / rel, tmp)
        tmp.replace(dst)
        dst.chmod(0o444)


def check_pinned(eval_cache: Path, hashes: dict) -> list[str]:
    """What differs from the recorded hashes ([] when everything matches)."""
    bad = []
    for rel, want in sorted(hashes.items()):
        path = Path(eval_cache) / rel
        if not path.is_file():
            bad.append(f"{rel} is missing")
        elif file_sha256(path) != want:
            bad.append(f"{rel} changed")
    return bad


def repair_pinned(eval_cache: Path, view: DataView | None, hashes: dict) -> str:
    """Restore the pinned copy from the shared cache, if that still holds the recorded content."""
    if view is None:
        raise PinnedError("the evaluation inputs changed and there is no data cache to restore them from")
    shared = check_pinned(view.cache, hashes)
    if shared:
        raise PinnedError("the evaluation inputs changed, and the shared data cache no longer matches "
                          f"what this tag was measured on ({'; '.join(shared[:4])}): re-prepare the data "
                          "(uv run prepare.py) and start a new tag")
    for p in Path(eval_cache).rglob("*"):
        if p.is_file():
            p.chmod(0o644)
    _copy_pinned(view.cache, Path(eval_cache), hashes)
    return f"restored {len(hashes)} pinned input file(s) from {view.cache}"
