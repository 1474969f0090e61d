"""
The one device command: what train.py gets out of a GPU, in one call under a hard deadline.

    python3 scripts/gpu_check.py [--deadline 480] [--out DIR] [--budget 20]   # on a GPU machine
    uv run scripts/gpu_check.py --smoke --out DIR                            # every step, CPU, tiny

Plain python3 is enough (torch, numpy, pyarrow, tiktoken, requests): no uv, no network. Data comes
from `.device-carry/cache` when it exists (built here by scripts/build_device_carry.py), else
from $AUTORESEARCH_CACHE, else it is prepared offline. Each step runs in its own subprocess with
its own timeout; a step that cannot finish before the deadline is skipped and says why. Every
step appends one JSON line to DIR/results.jsonl; everything printed goes to DIR/gpu_check.log too.

Steps: env (device, versions, a bf16 GEMM peak) | data | attn:<backend> (why it fails, or its
error vs float64 with the model's dtypes and its fwd+bwd time at the training shape, eager and
compiled, with compile seconds) | model:<backend> (tok/s, MFU, peak memory; no evaluation) |
recipe (train.py through the loop's runner with a short budget, then the trusted evaluation) |
recipe-warm (the same again, with the compile caches warm). See docs/gpu.md.
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
CARRY = REPO / ".device-carry"  # built by scripts/build_device_carry.py; git-ignored
DEFAULT_DEADLINE = 480  # seconds: the whole check fits 8 minutes of one 10-minute device call
FINAL_RESERVE = 5  # seconds kept back at the end for writing the summary
RECIPE_BUDGET = 20  # training seconds of the recipe run: enough for steady steps after compile
SMOKE_RECIPE_BUDGET = 2
BACKENDS = ("fa3", "flex", "sdpa", "naive")
GEMM_N = 8192  # bf16 square GEMM for the peak: big enough to saturate an H100/H200
GEMM_ITERS = 20
ATTN_ITERS = 10  # timed fwd+bwd calls per window after a warm-up call
MODEL_WARMUP, MODEL_STEPS = 3, 8  # optimizer steps: untimed (compile, autotune), then timed
INDUCTOR_CACHE = Path(tempfile.gettempdir()) / "gpu_check_inductor"  # shared by the recipe runs

# (name, seconds it needs at least, seconds it may take at most) on an H100-class GPU. The smoke
# run on CPU uses the same order and timeouts, and needs SMOKE_NEED seconds to start a step.
STEPS = [("env", 10, 60), ("data", 5, 120),
         ("attn:fa3", 10, 90), ("attn:flex", 20, 150), ("attn:sdpa", 15, 120),
         ("model:fa3", 45, 150), ("model:flex", 45, 150), ("model:sdpa", 40, 150),
         ("recipe", 120, 300), ("recipe-warm", 80, 240),
         ("attn:naive", 10, 60), ("model:naive", 30, 120)]
SMOKE_NEED = 1  # the smoke run on CPU: every step is tried; the deadline still applies


# ---------------------------------------------------------------------------------------------
# The parent: plan, deadline, subprocesses, results.jsonl, the tee'd log.
# ---------------------------------------------------------------------------------------------


class Tee:
    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            sys.stdout.write(text)
            sys.stdout.flush()
            self.file.write(text)


def child_env(args, data_cache):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               TORCHINDUCTOR_CACHE_DIR=str(INDUCTOR_CACHE))
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


def run_step(name, spec, env, timeout, tee, scratch):
    """One step in its own process group; (status, result, seconds)."""
    spec_path, result_path = Path(scratch) / f"{name}.spec.json", Path(scratch) / f"{name}.result.json"
    spec_path.write_text(json.dumps(dict(spec, step=name, result=str(result_path))))
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
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                pass
    reader.join(timeout=5)
    seconds = time.monotonic() - t0
    try:
        result = json.loads(result_path.read_text())
    except (OSError, ValueError):
        result = {}
    if timed_out:
        return "timeout", dict(result, reason=f"killed after {timeout:.0f}s (its timeout)"), seconds
    if proc.returncode != 0 or not result:
        reason = result.get("error") or f"exit code {proc.returncode} without a result"
        return "failed", dict(result, reason=reason), seconds
    return "ok", result, seconds


def run_inline(name, spec, env, tee):
    """--inline (the CI smoke test): the step in this process, so a 2-core runner does not pay a
    torch import per step. No timeout is enforced; the device run never uses this."""
    saved = dict(os.environ)
    os.environ.update(env)
    t0 = time.monotonic()
    try:
        if "prepare" in sys.modules:  # it reads the profile, cache and pointer at import
            import importlib
            importlib.reload(sys.modules["prepare"])
        spec_path = Path(spec["scratch"]) / f"{name}.spec.json"
        result_path = Path(spec["scratch"]) / f"{name}.result.json"
        spec_path.write_text(json.dumps(dict(spec, step=name, result=str(result_path))))
        code = main_child(str(spec_path))
        result = json.loads(result_path.read_text())
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for line in json.dumps(result, default=str, indent=1).splitlines():
        tee.write(f"  [{name}] {line}\n")
    status = "ok" if code == 0 else "failed"
    if status == "failed":
        result["reason"] = result.get("error", "failed")
    return status, result, time.monotonic() - t0


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
    if name == "recipe-warm" and done.get("recipe", {}).get("status") != "ok":
        return "the recipe step did not finish"
    return None


def main_parent(args):
    out = Path(args.out or os.environ.get("OUT") or "out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    tee = Tee(out / "gpu_check.log")
    results = out / "results.jsonl"
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="gpu_check-")
    data_cache = pick_data_cache(args, scratch)
    env = child_env(args, data_cache)
    commit = git_commit()
    tee.write(f"gpu_check {'--smoke ' if args.smoke else ''}deadline {args.deadline}s, out {out}, "
              f"data cache {data_cache}, python {sys.version.split()[0]}, commit {commit}\n")
    done, spec = {}, {"smoke": args.smoke, "budget": args.budget, "out": str(out), "scratch": scratch}
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
            spec["gemm_tflops"] = done.get("env", {}).get("result", {}).get("gemm_tflops")
            if args.inline:
                status, result, seconds = run_inline(name, spec, env, tee)
            else:
                status, result, seconds = run_step(name, spec, env, min(most, left), tee, scratch)
        done[name] = {"status": status, "result": result}
        line = {"step": name, "status": status, "seconds": round(seconds, 2), "started_at": started,
                "commit": commit, **result}
        with open(results, "a") as f:
            f.write(json.dumps(line, default=str) + "\n")
        note = result.get("reason")
        if status == "ok" and result.get("usable") is False:
            note = f"{name.partition(':')[2]} is not usable here: {note}"
        tee.write(f"-- {name}: {status} in {seconds:.1f}s{': ' + str(note) if note else ''}\n")
    tee.write(f"done in {time.monotonic() - start:.1f}s; one line per step in {results}\n")
    shutil.rmtree(scratch, ignore_errors=True)  # the recipe runs' artifacts and caches
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


# ---------------------------------------------------------------------------------------------
# The steps (each runs in a child process: python3 gpu_check.py --run-step SPEC).
# ---------------------------------------------------------------------------------------------


def runtime():
    """(torch, train, prepare, device, autocast, compile_on) as train.py sets them up."""
    sys.path.insert(0, str(REPO))
    import torch
    import prepare
    import train
    device, autocast, compile_on = train.setup_runtime()
    return torch, train, prepare, device, autocast, compile_on


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def step_env(spec):
    torch, train, prepare, device, _, _ = runtime()
    import platform
    r = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
         "platform": platform.platform(), "device": str(device), "cpu_count": os.cpu_count(),
         "profile": prepare.PROFILE, "cascade": train.attention_candidates(device)}
    for mod in ("kernels", "triton", "numpy", "pyarrow", "tiktoken", "rustbpe"):
        try:
            r[f"has_{mod}"] = getattr(__import__(mod), "__version__", "yes")
        except Exception as e:
            r[f"has_{mod}"] = f"no ({type(e).__name__})"
    if device.type == "cuda":
        r["name"] = torch.cuda.get_device_name(device)
        r["capability"] = "sm_%d%d" % torch.cuda.get_device_capability(device)
        r["memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
        r["table_peak_tflops"] = train.peak_flops_for(r["name"]) / 1e12
    n, dtype = (GEMM_N, torch.bfloat16) if device.type == "cuda" else (256, torch.float32)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(GEMM_ITERS):
        a @ b
    sync(torch, device)
    r["gemm_tflops"] = round(2 * n ** 3 * GEMM_ITERS / (time.perf_counter() - t0) / 1e12, 3)
    r["gemm"] = f"{n}x{n} {str(dtype).replace('torch.', '')}"
    print(json.dumps(r, indent=1))
    return r


def step_data(spec):
    sys.path.insert(0, str(REPO))
    import prepare
    if not (prepare.CACHE_DIR / f"prepared-{prepare.PROFILE}.json").exists():
        print(f"no prepared {prepare.PROFILE} data in {prepare.CACHE_DIR}: preparing offline")
        proc = subprocess.run([sys.executable, str(REPO / "prepare.py"), "--offline"], cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(f"prepare.py --offline exited {proc.returncode}")
        return dict(subprocess_json("import prepare, json; print(json.dumps(prepare.describe()))"),
                    prepared_now=True)
    return dict(prepare.describe(), prepared_now=False)


def subprocess_json(code):
    """Run code in a fresh interpreter (prepare reads its cache pointer at import) and parse its last line."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def shapes(train, prepare):
    """The training shape: (cfg, rows, windows) of the profile in force."""
    knobs = train.effective_knobs(prepare.PROFILE)
    cfg = train.model_config(prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN, prepare.PROFILE)
    return cfg, knobs["rows"], sorted(set(train.layer_windows(cfg)))


def fwd_bwd_ms(torch, fn, q, k, v, windows, autocast, device, iters):
    """(first call seconds, steady ms per fwd+bwd averaged over the windows)."""
    def once(w):
        with autocast:
            out = fn(q, k, v, w)
        out.float().square().mean().backward()
    sync(torch, device)
    t0 = time.perf_counter()
    for w in windows:
        once(w)
    sync(torch, device)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(iters):
        for w in windows:
            once(w)
    sync(torch, device)
    return first, (time.perf_counter() - t0) / (iters * len(windows)) * 1000


def step_attn(spec, backend):
    torch, train, prepare, device, autocast, compile_on = runtime()
    cfg, rows, windows = shapes(train, prepare)
    model = train.build_model(cfg).to(device)
    dtypes = train.model_attention_dtypes(model, autocast, device)
    del model
    H, Hkv, D, T = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"], cfg["sequence_len"]
    r = {"backend": backend, "dtypes": [[str(d).replace("torch.", "") for d in t] for t in dtypes],
         "shape": {"B": rows, "T": T, "H": H, "Hkv": Hkv, "D": D, "windows": windows}}
    modes = ["eager", "compiled"]
    for mode in modes:
        if mode == "compiled" and not compile_on:
            r[mode] = {"ok": False, "reason": "train.py does not compile on this device (COMPILE_CPU)"}
            continue
        try:
            train.set_attention_backend(backend, T, windows, device)
            fn = torch.compile(train.attend, dynamic=False) if mode == "compiled" else train.attend
            t0 = time.perf_counter()
            err = max(train.check_attention(fn, device, autocast, H, Hkv, D, T, windows, dts) for dts in dtypes)
            check_s = time.perf_counter() - t0
            g = torch.Generator(device="cpu").manual_seed(1)
            q, k, v = (torch.randn(rows, T, h, D, generator=g).to(device, dt).requires_grad_()
                       for h, dt in zip((H, Hkv, Hkv), dtypes[0]))
            first, ms = fwd_bwd_ms(torch, fn, q, k, v, windows, autocast, device, ATTN_ITERS if device.type == "cuda" else 1)
            r[mode] = {"ok": True, "max_err_vs_fp64": err, "ms_fwd_bwd": round(ms, 3), "check_s": round(check_s, 2),
                       "first_call_s": round(first, 2),
                       "compile_s": round(max(0.0, first - ms * len(windows) / 1000), 2) if mode == "compiled" else None}
            if device.type == "cuda":
                r[mode]["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        except Exception as e:
            r[mode] = {"ok": False, "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
        finally:
            train.set_attention_backend("sdpa")
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
        print(f"{backend} {mode}: {r[mode]}")
    wanted = "compiled" if compile_on else "eager"
    r["usable"] = r[wanted]["ok"]
    if not r["usable"]:
        r["reason"] = r[wanted]["reason"]
    return r


def step_model(spec, backend):
    """train.py's model, optimizer and loop body at the profile's shape: tok/s, MFU, memory."""
    torch, train, prepare, device, autocast, compile_on = runtime()
    import math
    import torch.nn.functional as F
    torch.manual_seed(0)
    knobs = train.effective_knobs(prepare.PROFILE)
    tokenizer = prepare.Tokenizer.from_directory()
    V, T = tokenizer.get_vocab_size(), prepare.MAX_SEQ_LEN
    cfg = train.model_config(V, T, prepare.PROFILE)
    model = train.build_model(cfg).to(device)
    train.set_attention_backend(backend, T, model.windows, device)
    optimizer = train.MuonAdamW(model, knobs)
    rows = knobs["rows"]
    accum = max(1, round(knobs["total"] / (rows * T)))
    loader = prepare.make_dataloader(tokenizer, rows, T, "train", device=device)

    def loss_fn(x, y):
        return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1), ignore_index=-1)
    train_loss = torch.compile(loss_fn, dynamic=False) if compile_on else loss_fn
    plan = {"budget": 1e9, "steps": 0, "decay_steps": 0, "warmup_steps": 0}
    warmup, steps = (MODEL_WARMUP, MODEL_STEPS) if device.type == "cuda" else (1, 2)
    x, y, _ = next(loader)
    dts, losses = [], []
    for step in range(warmup + steps):
        sync(torch, device)
        t0 = time.perf_counter()
        train.apply_schedule(optimizer, step, 0.0, plan)
        for _ in range(accum):
            with autocast:
                loss = train_loss(x, y)
            (loss / accum).backward()
            x, y, _ = next(loader)
        if knobs["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), knobs["grad_clip"])
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        sync(torch, device)
        dts.append(time.perf_counter() - t0)
        print(f"step {step + 1}: loss {losses[-1]:.4f} dt {dts[-1] * 1000:.0f}ms")
    timed = sum(dts[warmup:])
    tokens_per_step = accum * rows * T
    flops_per_step = model.flops_per_token() * tokens_per_step
    peak = train.peak_flops(device)
    r = {"backend": backend, "tok_per_s": round(tokens_per_step * steps / timed), "ms_per_step": round(timed / steps * 1000, 1),
         "first_steps_s": [round(d, 2) for d in dts[:warmup]], "tokens_per_step": tokens_per_step,
         "mfu_percent": round(train.mfu_percent(flops_per_step, steps, timed, peak), 2),
         "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 2), "compile": compile_on,
         "loss_first_last": [round(losses[0], 4), round(losses[-1], 4)], "finite": all(map(math.isfinite, losses))}
    if spec.get("gemm_tflops"):
        r["mfu_vs_measured_gemm"] = round(train.mfu_percent(flops_per_step, steps, timed, spec["gemm_tflops"] * 1e12), 2)
    r["peak_mem_gib"] = round(train.peak_memory_mb(device) / 1024, 2)
    if not r["finite"]:
        raise RuntimeError(f"non-finite loss: {losses}")
    return r


def call_with_known_kwargs(fn, *args, **kwargs):
    """The harness's runner and verify are changing: pass only the keywords they still take."""
    import inspect
    params = inspect.signature(fn).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


def step_recipe(spec, label):
    """train.py as the loop runs it (harness.runner.run_train), then the trusted evaluation."""
    sys.path.insert(0, str(REPO))
    import re
    from harness.runner import run_train
    from harness.verify import eval_rows, verify
    profile = os.environ["AUTORESEARCH_PROFILE"]
    budget = SMOKE_RECIPE_BUDGET if spec["smoke"] else spec["budget"]
    run_dir = Path(spec["scratch"]) / label
    # compile caches of their own: cold for `recipe` (the attn/model steps compiled similar graphs
    # into the shared one), warm for `recipe-warm`, which follows it
    for var, name in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        os.environ[var] = str(Path(spec["scratch"]) / f"recipe-{name}-cache")
    t0 = time.perf_counter()
    import prepare
    from harness.sandbox import DataView, detect
    box = detect()   # bubblewrap where the machine has it; sealed mode (no self-evaluation) either way
    view = DataView.from_describe({"paths": prepare.data_paths()})
    res = call_with_known_kwargs(run_train, REPO, run_dir, 1, budget, timeout=budget + 400,
                                 env={"AUTORESEARCH_SEED": "42"}, sealed=True, sandbox=box, data=view,
                                 clean=False)   # never clean the checkout this check runs in
    wall = time.perf_counter() - t0
    text = Path(res.log_path).read_text(errors="replace")
    Path(spec["out"], f"{label}.log").write_text(text)  # the run's own log, beside results.jsonl
    s = res.summary or {}
    dts = [float(m) / 1000 for m in re.findall(r"^step \d+ .*?\| dt (\d+)ms", text, re.M)]
    startup_steps = train_startup_steps(profile)
    r = {"budget": budget, "crash": res.crash_class, "wall_s": round(wall, 1),
         "summary": {k: s.get(k) for k in ("val_bpb", "training_seconds", "total_seconds", "eval_seconds",
                                            "mfu_percent", "peak_vram_mb", "num_steps", "attn_backend",
                                            "device", "profile", "data") if k in s},
         "attention_lines": [ln for ln in text.splitlines() if ln.startswith("attention:")][:8],
         "first_steps_s": [round(d, 2) for d in dts[:startup_steps]],
         "steady_step_ms": round(1000 * sum(dts[startup_steps:]) / max(1, len(dts[startup_steps:])), 1)}
    if s.get("total_seconds") is not None:  # before the first step: imports, model, probe (compiles)
        r["startup_s"] = round(float(s["total_seconds"]) - float(s.get("training_seconds") or 0)
                               - float(s.get("eval_seconds") or 0) - sum(dts[:startup_steps]), 1)
        r["compile_in_first_steps_s"] = round(sum(dts[:startup_steps]), 1)
    if res.crash_class:
        raise RuntimeError(f"train.py run ended as {res.crash_class}: {res.log_tail[-600:]}")
    train_source = (REPO / "train.py").read_text()
    v = call_with_known_kwargs(verify, res.artifact, train_source=train_source,
                               prepare_source=(REPO / "prepare.py").read_text(), printed_bpb=None, sealed=True,
                               rows=eval_rows(profile), env=dict(os.environ), timeout_s=400,
                               sandbox=box, eval_cache=Path(os.environ.get("AUTORESEARCH_CACHE") or view.cache),
                               work_root=run_dir / ".verify")
    r["sandbox"] = box.describe()
    r["clock"] = (res.extra or {}).get("clock")
    r["verify"] = {"ok": v.ok, "reason": v.reason, "trusted_bpb": v.trusted_bpb, "seconds": round(v.seconds, 1),
                   "timings": (v.details or {}).get("timings")}
    if not v.ok:
        raise RuntimeError(f"trusted evaluation refused the run: {v.reason}")
    return r


def train_startup_steps(profile):
    sys.path.insert(0, str(REPO))
    import train
    return train.effective_knobs(profile)["startup"]


def main_child(spec_path):
    spec = json.loads(Path(spec_path).read_text())
    name = spec["step"]
    kind, _, arg = name.partition(":")
    result = {}
    try:
        if kind == "env":
            result = step_env(spec)
        elif kind == "data":
            result = step_data(spec)
        elif kind == "attn":
            result = step_attn(spec, arg)
        elif kind == "model":
            result = step_model(spec, arg)
        elif kind in ("recipe", "recipe-warm"):
            result = step_recipe(spec, kind)
        else:
            raise ValueError(f"unknown step {name}")
        code = 0
    except Exception as e:
        import traceback
        traceback.print_exc()
        result = dict(result, error=f"{type(e).__name__}: {e}"[:600])
        code = 1
    Path(spec["result"]).write_text(json.dumps(result, default=str))
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
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
        return main_child(args.run_step)
    return main_parent(args)


if __name__ == "__main__":
    sys.exit(main())
