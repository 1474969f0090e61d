"""
The steps of scripts/gpu_check.py. Each runs in a child process of its own (or in the parent for
the CI smoke test, --inline) and writes its result as it goes to OUT/steps/<name>.json, so a step
that is killed leaves what it had. Plain python3 on the device: torch, numpy, pyarrow, tiktoken.
"""

import json
import math
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GEMM_N = 8192  # bf16 square GEMM for the peak: big enough to saturate an H100/H200
GEMM_ITERS = 20
ATTN_ITERS = 10  # timed fwd+bwd calls per window after a warm-up call
MODEL_WARMUP, MODEL_STEPS = 3, 8  # optimizer steps: untimed (compile, autotune), then timed
EXPERIMENT_S = 300  # the loop's budget: the duty cycle is training time over wall time of such a run
FALLBACK_STEPS = 3
STEP_RE = re.compile(r"^step \d+ .*?\| dt (\d+)ms", re.M)


# ---------------------------------------------------------------------------------------------
# Partial results, and ending what a step started.
# ---------------------------------------------------------------------------------------------


def partial_path(out, name):
    return Path(out) / "steps" / f"{name.replace(':', '_')}.json"


def read_partial(out, name):
    try:
        return json.loads(partial_path(out, name).read_text())
    except (OSError, ValueError):
        return {}


class Record(dict):
    """The step's result, rewritten (atomically) on every update, so a kill keeps what was measured."""

    def __init__(self, out, name):
        super().__init__()
        self.path = partial_path(out, name)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self, default=str))
        os.replace(tmp, self.path)


def end_started(scratch):
    """The trusted evaluator runs in a process group of its own (harness/verify.py), recorded in a
    pid file; train.py (RunPlace(own_session=False)) is in this step's group."""
    from harness.procs import kill_leftover
    for run_dir in Path(scratch).glob("tag*"):
        kill_leftover(run_dir)


def guard_the_step(scratch):
    """SIGTERM (the parent's timeout): end what this step started, then exit. A parent that dies
    (the device call killed): the same, then the whole group, within a second."""
    def on_term(signum, frame):
        end_started(scratch)
        os._exit(143)
    signal.signal(signal.SIGTERM, on_term)
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        end_started(scratch)
        os.killpg(0, signal.SIGKILL)
    threading.Thread(target=watch, daemon=True).start()


def run(spec, watch_parent=True):
    """Run one step; 0 when it finished. Its result is in OUT/steps/<name>.json ("done": true)."""
    name = spec["step"]
    if watch_parent:
        guard_the_step(spec["scratch"])
    rec = Record(spec["out"], name)
    kind, _, arg = name.partition(":")
    steps = {"env": step_env, "data": step_data, "recipe": step_recipe, "recipe-warm": step_recipe,
             "graph": step_graph, "fallback": step_fallback, "attn": step_attn, "model": step_model}
    try:
        if kind not in steps:
            raise ValueError(f"unknown step {name}")
        steps[kind](rec, spec, arg or name)
        rec.update(done=True)
        return 0
    except Exception as e:
        import traceback
        traceback.print_exc()
        rec.update(error=f"{type(e).__name__}: {e}"[:600])
        return 1


# ---------------------------------------------------------------------------------------------
# Set-up shared by the steps.
# ---------------------------------------------------------------------------------------------


def setup():
    """(torch, train, prepare, runtime, device, autocast): train.py with the profile's knob values."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import torch
    import prepare
    import runtime
    from search.knobs import load_train
    train = load_train(prepare.PROFILE, REPO / "train.py", name="train_gpu_check")
    device, autocast = runtime.setup_device()
    return torch, train, prepare, runtime, device, autocast


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def gemm_tflops(spec):
    return (spec.get("earlier", {}).get("env") or {}).get("gemm_tflops")


def step_env(rec, spec, _):
    torch, train, prepare, runtime, device, _ = setup()
    import platform
    names, skipped = runtime.attn.attention_candidates(device)
    rec.update(python=sys.version.split()[0], torch=torch.__version__, cuda=torch.version.cuda,
               platform=platform.platform(), device=str(device), cpu_count=os.cpu_count(),
               profile=prepare.PROFILE, cascade=names, skipped=skipped, compile=train.COMPILE,
               ptxas=os.environ.get("TRITON_PTXAS_PATH"),
               alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    for mod in ("kernels", "triton", "numpy", "pyarrow", "tiktoken", "rustbpe"):
        try:
            rec.update({f"has_{mod}": getattr(__import__(mod), "__version__", "yes")})
        except Exception as e:
            rec.update({f"has_{mod}": f"no ({type(e).__name__})"})
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        rec.update(name=name, capability="sm_%d%d" % torch.cuda.get_device_capability(device),
                   memory_gib=round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1),
                   table_peak_tflops=runtime.peak_flops_for(name) / 1e12)
        flops = runtime.measured_gemm_flops(device, GEMM_N, GEMM_ITERS)
        rec.update(gemm_tflops=round(flops / 1e12, 3), gemm=f"{GEMM_N}x{GEMM_N} bfloat16")
    else:
        n = 256
        a, b = torch.randn(n, n), torch.randn(n, n)
        t0 = time.perf_counter()
        for _ in range(GEMM_ITERS):
            a @ b
        rec.update(gemm_tflops=round(2 * n ** 3 * GEMM_ITERS / (time.perf_counter() - t0) / 1e12, 4),
                   gemm=f"{n}x{n} float32")
    print(json.dumps(rec, indent=1))


def step_data(rec, spec, _):
    import subprocess
    sys.path.insert(0, str(REPO))
    import prepare
    if not (prepare.CACHE_DIR / f"prepared-{prepare.PROFILE}.json").exists():
        print(f"no prepared {prepare.PROFILE} data in {prepare.CACHE_DIR}: preparing offline")
        proc = subprocess.run([sys.executable, str(REPO / "prepare.py"), "--offline"], cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(f"prepare.py --offline exited {proc.returncode}")
        code = "import prepare, json; print(json.dumps(prepare.describe()))"
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
        rec.update(json.loads(out.stdout.strip().splitlines()[-1]), prepared_now=True)
        return
    rec.update(prepare.describe(), prepared_now=False)


# ---------------------------------------------------------------------------------------------
# The recipe as the loop runs it, the graph on the device, the compile fallback.
# ---------------------------------------------------------------------------------------------


def run_files(prepare, overrides=None):
    """train.py as a tag on this profile commits it (its knob values written in), plus `overrides`."""
    from search import knobs
    from harness.job import FIXED_SOURCES
    source, _ = knobs.for_profile((REPO / "train.py").read_text(), prepare.PROFILE)
    if overrides:
        source = knobs.set_knobs(source, {k: v for k, v in overrides.items() if k in knobs.values(source)})
    return {"train.py": source, **{name: (REPO / name).read_text() for name in FIXED_SOURCES}}


def log_figures(text):
    """What train.py's log says: step times, tokens per step, FLOPs per token, startup steps."""
    dts = [float(m) / 1000 for m in STEP_RE.findall(text)]
    m = re.search(r"flops/token ([0-9.e+]+) \| batch \S+ x\d+ = ([0-9,]+) tokens/step", text)
    flops, tokens = (float(m.group(1)), int(m.group(2).replace(",", ""))) if m else (None, None)
    return dts, flops, tokens


def train_run(rec, spec, label, n, files, *, budget, env, compile_cache="off"):
    """train.py through harness.runner.run_train, sealed where bubblewrap exists, its log streamed
    into OUT/<label>.log, in this step's process group. Returns (RunResult, run_dir, sandbox)."""
    import prepare
    from harness import compiled as cc
    from harness.job import materialise
    from harness.runner import RunPlace, RunSpec, RunView, run_train
    from harness.sandbox import DataView, detect
    from harness.verify import eval_rows
    run_dir = Path(spec["scratch"]) / "tag"
    src = materialise(files, run_dir / ".runs" / label)
    box = detect()   # bubblewrap where the machine has it; sealed mode (no self-evaluation) either way
    view = DataView.from_describe({"paths": prepare.data_paths()})
    log_path = Path(spec["out"]) / f"{label}.log"
    rec.update(phase="training", log=log_path.name, sandbox=box.describe(), compile_cache=compile_cache)
    res = run_train(RunSpec(src, run_dir, n, budget, timeout=budget + 400, env=env, sealed=True,
                            eval_rows=eval_rows(prepare.PROFILE),
                            view=RunView(sandbox=box, data=view, compile_cache=compile_cache, cache_work=run_dir / cc.WORK),
                            place=RunPlace(log_path=log_path, own_session=False)))
    return res, run_dir, box


def step_recipe(rec, spec, label):
    """`recipe` compiles cold and writes the trusted compile cache; `recipe-warm` reads it."""
    import prepare
    import runtime
    from harness import compiled as cc
    from harness.verify import EvalPlace, Evaluation, eval_rows, verify
    budget = spec["budget"]
    files = run_files(prepare)
    t0 = time.perf_counter()
    n, mode = (1, "write") if label == "recipe" else (2, "read")
    res, run_dir, box = train_run(rec, spec, label, n, files, budget=budget, env={"AUTORESEARCH_SEED": "42"},
                                  compile_cache=mode)
    text = Path(res.log_path).read_text(errors="replace")
    s = res.summary or {}
    dts, flops_per_token, tokens_per_step = log_figures(text)
    from search.knobs import values
    startup_steps = values(files["train.py"]).get("STARTUP_STEPS", 10)
    steady = dts[startup_steps:] or dts[1:]
    clock = (res.extra or {}).get("clock") or {}
    rec.update(budget=budget, crash=res.crash_class, wall_s=round(time.perf_counter() - t0, 1), clock=clock,
               summary={k: s.get(k) for k in ("val_bpb", "training_seconds", "total_seconds", "mfu_percent",
                                               "peak_vram_mb", "num_steps", "attn_backend", "compile", "peak_flops",
                                               "device", "profile", "data") if k in s},
               attention_lines=[ln for ln in text.splitlines() if ln.startswith("attention:")][:8],
               compile_lines=[ln for ln in text.splitlines() if ln.startswith("COMPILE FAILED")][:8],
               startup_s=clock.get("startup_s"), post_s=clock.get("post_s"),
               first_steps_s=[round(d, 2) for d in dts[:startup_steps]],
               steady_step_ms=round(1000 * sum(steady) / len(steady), 1) if steady else None)
    if steady and tokens_per_step:
        tok_s = tokens_per_step * len(steady) / sum(steady)
        rec.update(tok_per_s=round(tok_s), tokens_per_step=tokens_per_step, flops_per_token=flops_per_token)
        table = runtime.peak_flops_for((spec.get("earlier", {}).get("env") or {}).get("name") or "")
        if table:
            rec.update(mfu_table_percent=round(runtime.mfu_percent(flops_per_token, tok_s, 1.0, table), 2))
        if gemm_tflops(spec):
            rec.update(mfu_gemm_percent=round(runtime.mfu_percent(flops_per_token, tok_s, 1.0, gemm_tflops(spec) * 1e12), 2))
    if mode == "write":
        work = run_dir / cc.WORK
        size = sum(f.stat().st_size for f in work.rglob("*") if f.is_file()) if work.is_dir() else 0
        if res.crash_class is None and size:
            cc.publish(run_dir, work)
        rec.update(compile_cache_bytes=size)
    if res.crash_class:
        raise RuntimeError(f"train.py run ended as {res.crash_class}: {res.log_tail[-600:]}")
    rec.update(phase="verify", artifact=str(res.artifact))
    v = verify(res.artifact,
               Evaluation(files["train.py"], files["prepare.py"], eval_rows(prepare.PROFILE), sealed=True,
                          eval_cache=Path(os.environ.get("AUTORESEARCH_CACHE") or prepare.CACHE_DIR)),
               EvalPlace(sandbox=box, env=dict(os.environ), timeout_s=400, work_root=run_dir / ".verify"))
    details = v.details or {}
    overhead = sum(x for x in (clock.get("startup_s"), clock.get("post_s"), v.seconds) if x)
    rec.update(phase="done", verify={"ok": v.ok, "reason": v.reason, "trusted_bpb": v.trusted_bpb,
                                     "seconds": round(v.seconds, 1), "timings": details.get("timings")},
               causality=details.get("causality"), overhead_s=round(overhead, 1),
               duty_cycle_300s=round(EXPERIMENT_S / (EXPERIMENT_S + overhead), 3))
    if not v.ok:
        raise RuntimeError(f"trusted evaluation refused the run: {v.reason}")


def step_graph(rec, spec, _):
    """The recorded graph replayed on this device as the evaluator replays it: identical input
    twice (run-to-run), a row's future replaced (the causality check wants a bitwise-equal
    prefix), and the eager model under autocast (what training ran)."""
    torch, train, prepare, runtime, device, autocast = setup()
    from harness import graph as G
    from harness.verify import eval_rows
    art = torch.load(spec["earlier"]["recipe"]["artifact"], map_location="cpu", weights_only=True)
    rows, T = eval_rows(prepare.PROFILE), prepare.MAX_SEQ_LEN
    g = G.load(art["graph"], art["state_dict"], art["constants"], rows=rows, seq_len=T, device=device)
    recorded = json.loads(art["graph"])
    rec.update(recorded_on=recorded["device"], nodes=len(recorded["nodes"]),
               ops=sorted({n["op"] for n in recorded["nodes"] if "attention" in n["op"]}))
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, art["config"]["vocab_size"], (rows, T), generator=gen).to(device)
    with torch.no_grad():
        sync(torch, device)
        t0 = time.perf_counter()
        a = g(tokens)
        sync(torch, device)
        rec.update(replay_ms=round(1000 * (time.perf_counter() - t0), 1))
        b = g(tokens)
        cut = T // 2
        spliced = tokens.clone()
        spliced[:, cut:] = tokens.roll(1, dims=0)[:, cut:]
        c = g(spliced)
    scale = a.abs().max().item()
    rec.update(run_to_run_bitwise=bool(torch.equal(a, b)), run_to_run_max_diff=(a - b).abs().max().item(),
               prefix_bitwise=bool(torch.equal(a[:, :cut], c[:, :cut])),
               prefix_max_diff=(a[:, :cut] - c[:, :cut]).abs().max().item(), logit_scale=scale,
               suffix_changed=bool(not torch.equal(a[:, cut:], c[:, cut:])))
    model = train.build_model(art["config"]).to(device)
    model.load_state_dict(art["state_dict"])
    model.eval()
    with torch.no_grad(), autocast:
        eager = model(tokens)
    rec.update(vs_eager_max_diff=(eager.float() - a.float()).abs().max().item())
    if device.type == "cuda":
        rec.update(sdpa_flash=torch.backends.cuda.flash_sdp_enabled(),
                   sdpa_mem_efficient=torch.backends.cuda.mem_efficient_sdp_enabled(),
                   sdpa_cudnn=torch.backends.cuda.cudnn_sdp_enabled())
    print(json.dumps(rec, indent=1, default=str))


def step_fallback(rec, spec, _):
    """train.py with compile on and its compiler broken (C++ and ptxas are /bin/false): every
    compiled part falls back to eager with one loud line, and it still trains."""
    import prepare
    gpu = not spec["smoke"]
    overrides = {"COMPILE": True}
    if gpu:   # eager keeps more activations than compiled: a quarter of the micro-batch, same tokens/step
        overrides["DEVICE_BATCH_SIZE"] = 32
    fresh = Path(spec["scratch"]) / "fallback-cache"   # unsealed runs: no cached kernel may hide the failure
    env = {"AUTORESEARCH_STEPS": str(FALLBACK_STEPS), "CXX": "/bin/false", "TRITON_PTXAS_PATH": "/bin/false",
           "TORCHINDUCTOR_CACHE_DIR": str(fresh / "inductor"), "TRITON_CACHE_DIR": str(fresh / "triton")}
    res, _, _ = train_run(rec, spec, "fallback", 3, run_files(prepare, overrides), budget=60, env=env)
    text = Path(res.log_path).read_text(errors="replace")
    dts, _, tokens = log_figures(text)
    s = res.summary or {}
    rec.update(phase="done", crash=res.crash_class, steps=len(dts), compile=s.get("compile"),
               compile_lines=[ln for ln in text.splitlines() if "COMPILE FAILED" in ln][:8],
               attention_lines=[ln for ln in text.splitlines() if ln.startswith("attention:")][:8],
               eager_tok_per_s=round(tokens * (len(dts) - 1) / sum(dts[1:])) if tokens and len(dts) > 1 else None)
    if res.crash_class:
        raise RuntimeError(f"the fallback run ended as {res.crash_class}: {res.log_tail[-600:]}")
    if not rec["compile_lines"] or s.get("compile") in ("on", "off", None):
        raise RuntimeError(f"no compile fell back (summary compile: {s.get('compile')})")


# ---------------------------------------------------------------------------------------------
# Per backend: attention alone, then the model's training step.
# ---------------------------------------------------------------------------------------------


def shapes(train, prepare):
    cfg = train.model_config(prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN)
    return cfg, train.DEVICE_BATCH_SIZE, sorted(set(train.layer_windows(cfg)))


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


def step_attn(rec, spec, backend):
    torch, train, prepare, runtime, device, autocast = setup()
    cfg, rows, windows = shapes(train, prepare)
    model = train.build_model(cfg).to(device)
    dtypes = runtime.attn.model_attention_dtypes(model, autocast, device)
    del model
    H, Hkv, D, T = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"], cfg["sequence_len"]
    rec.update(backend=backend, dtypes=[[str(d).replace("torch.", "") for d in t] for t in dtypes],
               shape={"B": rows, "T": T, "H": H, "Hkv": Hkv, "D": D, "windows": windows})
    for mode in ("eager", "compiled"):
        if mode == "compiled" and not train.COMPILE:
            rec.update({mode: {"ok": False, "reason": "train.py does not compile on this profile (COMPILE = False)"}})
            continue
        try:
            runtime.attn.set_backend(backend, T, windows, device)
            fn = torch.compile(runtime.attention, dynamic=False) if mode == "compiled" else runtime.attention
            t0 = time.perf_counter()
            err = max(runtime.attn.check_attention(fn, device, autocast, H, Hkv, D, T, windows, dts) for dts in dtypes)
            check_s = time.perf_counter() - t0
            g = torch.Generator(device="cpu").manual_seed(1)
            q, k, v = (torch.randn(rows, T, h, D, generator=g).to(device, dt).requires_grad_()
                       for h, dt in zip((H, Hkv, Hkv), dtypes[0]))
            first, ms = fwd_bwd_ms(torch, fn, q, k, v, windows, autocast, device, ATTN_ITERS if device.type == "cuda" else 1)
            r = {"ok": True, "max_err_vs_fp64": err, "ms_fwd_bwd": round(ms, 3), "check_s": round(check_s, 2),
                 "first_call_s": round(first, 2),
                 "compile_s": round(max(0.0, first - ms * len(windows) / 1000), 2) if mode == "compiled" else None}
            if device.type == "cuda":
                r["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        except Exception as e:
            r = {"ok": False, "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
        finally:
            runtime.attn.set_backend("sdpa")
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
        rec.update({mode: r})
        print(f"{backend} {mode}: {r}")
    wanted = "compiled" if train.COMPILE else "eager"
    rec.update(usable=rec[wanted]["ok"])
    if not rec["usable"]:
        rec.update(reason=rec[wanted]["reason"])


def step_model(rec, spec, backend):
    """train.py's model, optimizer and loop body at the profile's shape, forced to one backend:
    tok/s, MFU, memory, first-step (compile) seconds; no evaluation."""
    torch, train, prepare, runtime, device, autocast = setup()
    import torch.nn.functional as F
    torch.manual_seed(0)
    tokenizer = prepare.Tokenizer.from_directory()
    V, T = tokenizer.get_vocab_size(), prepare.MAX_SEQ_LEN
    model = train.build_model(train.model_config(V, T)).to(device)
    runtime.attn.set_backend(backend, T, model.windows, device)
    optimizer = train.MuonAdamW(model, train.COMPILE)
    rows = train.DEVICE_BATCH_SIZE
    accum = max(1, round(train.TOTAL_BATCH_SIZE / (rows * T)))
    loader = prepare.make_dataloader(tokenizer, rows, T, "train", device=device)
    x, y, _ = next(loader)

    def loss_fn(x, y):
        return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1), ignore_index=-1)

    def trial(f):
        with autocast:
            f(x, y).backward()
    t0 = time.perf_counter()
    train_loss = runtime.compiled(loss_fn, "model", train.COMPILE, trial)
    optimizer.zero_grad()
    rec.update(backend=backend, compile=train.COMPILE, compile_trial_s=round(time.perf_counter() - t0, 2))
    plan = {"budget": 1e9, "steps": 0, "decay_steps": 0, "warmup_steps": 0}
    warmup, steps = (MODEL_WARMUP, MODEL_STEPS) if device.type == "cuda" else (1, 2)
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
        if train.GRAD_CLIP > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train.GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        sync(torch, device)
        dts.append(time.perf_counter() - t0)
        rec.update(first_steps_s=[round(d, 2) for d in dts[:warmup]], steps_done=len(dts))
        print(f"step {step + 1}: loss {losses[-1]:.4f} dt {dts[-1] * 1000:.0f}ms")
    timed = sum(dts[warmup:])
    tokens_per_step = accum * rows * T
    flops_per_step = model.flops_per_token() * tokens_per_step
    peak, source = runtime.peak_flops(device)
    rec.update(tok_per_s=round(tokens_per_step * steps / timed), ms_per_step=round(timed / steps * 1000, 1),
               tokens_per_step=tokens_per_step, peak_source=source, compile_notes=list(runtime.COMPILE_NOTES),
               mfu_percent=round(runtime.mfu_percent(flops_per_step, steps, timed, peak), 2),
               params_M=round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
               loss_first_last=[round(losses[0], 4), round(losses[-1], 4)], finite=all(map(math.isfinite, losses)),
               peak_mem_gib=round(runtime.peak_memory_mb(device) / 1024, 2))
    if gemm_tflops(spec):
        rec.update(mfu_vs_measured_gemm=round(runtime.mfu_percent(flops_per_step, steps, timed, gemm_tflops(spec) * 1e12), 2))
    if not rec["finite"]:
        raise RuntimeError(f"non-finite loss: {losses}")
