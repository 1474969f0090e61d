"""
Fixed platform plumbing for autoresearch: what train.py calls, and what it hands the harness. The
research loop never edits this file (the guard treats it like prepare.py); train.py imports it and
may stop using any part of it (write its own attention, say), except save_model in loop mode.

    profile knobs   PROFILE_KNOBS: the cpu/tiny values of train.py's knobs, whose own values are the
                    reference's (gpu); use_profile_knobs() applies them to a bare run by hand
    device          setup_device(): device, autocast, threads, allocator, ptxas; peak_flops(),
                    mfu_percent(), peak_memory_mb()
    attention       attention(q, k, v, window): the backend pick_attention() chose (fa3, flex, sdpa,
                    naive); both live in attention.py, a fixed file beside this one
    compile         compiled(): torch.compile that falls back to eager, loudly (COMPILE_NOTES)
    state           save_state(), load_state(): the pre-decay training state (Hyperband promotion)
    model graph     save_model(): the trained model as data for the trusted evaluator, i.e. the
                    aten operators of one forward pass, recorded, plus the weights. The evaluator
                    (harness/eval_worker.py) replays that graph without running any of train.py.
                    It lives in graph_export.py, a fixed file beside this one.
    harness clock   budget_spent(): whether the harness's own clock of this run (docs/contracts.md)
                    has charged the budget, so an honest train.py with a slow start stops in time.

"""

import contextlib
import functools
import glob
import json
import os
import re
import resource
import subprocess
import sys
import time

import torch

import attention as attn  # the fixed attention plumbing beside this file
import graph_export as gx  # the fixed model-graph plumbing beside this file

# ---------------------------------------------------------------------------------------------
# Profile knobs. train.py's CAPS constants are the values that run on a GPU (the reference
# recipe). The cpu and tiny profiles run a smaller model: knob -> (train.py's value, theirs). A
# tag on those profiles starts with a commit that writes their values in (search/knobs.py
# for_profile), so the file always shows what runs; a knob already moved off train.py's value
# keeps the value it has. These are the cpu/tiny values the recorded CPU baseline ran with.
# ---------------------------------------------------------------------------------------------
PROFILE_KNOBS = {
    "DEPTH": (8, 4),
    "ASPECT_RATIO": (64, 32),
    "HEAD_DIM": (128, 64),
    "DEVICE_BATCH_SIZE": (128, 8),
    "TOTAL_BATCH_SIZE": (524288, 2048),
    "MATRIX_LR": (0.04, 0.02),
    "EMBEDDING_LR": (0.6, 0.3),
    "WEIGHT_DECAY": (0.2, 0.0),
    "MUON_VARIANT": ("reference", "classic"),
    "EMBED_DTYPE": ("bfloat16", "float32"),
    "GRAD_CLIP": (0.0, 1.0),
    "STARTUP_STEPS": (10, 3),
    "COMPILE": (True, False),
}
SMALL_PROFILES = ("cpu", "tiny")
# Set by every harness path that runs train.py (harness/runner.py, the search pool): the source
# already carries its profile's values, so use_profile_knobs() changes nothing.
KNOBS_AS_WRITTEN_ENV = "AUTORESEARCH_KNOBS_AS_WRITTEN"


def profile_changes(values, profile):
    """{knob: value} that `profile` runs instead of `values` (train.py's knobs as written)."""
    if profile not in SMALL_PROFILES:
        return {}
    return {k: small for k, (ref, small) in PROFILE_KNOBS.items()
            if k in values and type(values[k]) is type(ref) and values[k] == ref}


def use_profile_knobs(module_name, profile):
    """A bare `python train.py` on a small profile: set the profile's values on the module (in
    memory) and say which. Harness runs (KNOBS_AS_WRITTEN_ENV) keep the file's values."""
    if os.environ.get(KNOBS_AS_WRITTEN_ENV) == "1":
        return {}
    module = sys.modules[module_name]
    changes = profile_changes(vars(module), profile)
    for k, v in changes.items():
        setattr(module, k, v)
    if changes:
        print(f"profile {profile}: running these knobs at the profile's values (runtime.PROFILE_KNOBS): "
              + ", ".join(f"{k}={v!r}" for k, v in changes.items()), flush=True)
    return changes


# ---------------------------------------------------------------------------------------------
# Device: precision, threads, allocator, ptxas, peak FLOPs, memory.
# ---------------------------------------------------------------------------------------------

def defer_dynamo_import():
    """torch.optim marks its methods (add_param_group, zero_grad, state_dict, the functional
    adam...) as not to be compiled, as TorchDispatchMode marks save_model's recorder, and the mark
    imports torch._dynamo on the first call: 2.3 s of
    a tiny run's 8 s on this CPU, for a run that compiles nothing. Until something imports
    torch._dynamo (torch.compile does), nothing can be compiling, so the mark is a plain call;
    once it is imported, each mark becomes torch's own disable on its next call."""
    def deferred(mark, fn):
        def call(*args, **kwargs):
            if "torch._dynamo" not in sys.modules:
                return fn(*args, **kwargs)
            with contextlib.suppress(AttributeError):   # another thread may have been first
                delattr(fn, "__dynamo_disable")   # the name torch._compile reads (unmangled): its own again
            return mark(*args, **kwargs)
        return call

    optim = sys.modules.get("torch.optim.optimizer")
    if not hasattr(torch, "_disable_dynamo") or not hasattr(optim, "_use_grad_for_differentiable"):
        return   # another torch: its optimizers import what they import, as before
    marked = torch._disable_dynamo(lambda: None).__code__   # the wrapper's code, shared by every mark

    def marks(f, depth=0):
        """The marks in f or in its closure (the functional optimizers wrap a mark once more)."""
        if depth > 2 or not callable(f) or not hasattr(f, "__code__"):
            return
        if f.__code__ is marked:
            yield f
        for cell in f.__closure__ or ():
            try:
                yield from marks(cell.cell_contents, depth + 1)
            except ValueError:   # an empty cell
                pass

    # Each optimizer's step() is wrapped to set grad mode and break a dynamo graph around it; the
    # wrapper imports torch._dynamo for the graph break. Without dynamo there is no graph to break.
    grad_wrapper = optim._use_grad_for_differentiable(lambda self: None).__code__

    def deferred_step(wrapped):
        func = wrapped.__wrapped__

        @functools.wraps(func)
        def step(*args, **kwargs):
            if "torch._dynamo" in sys.modules:
                return wrapped(*args, **kwargs)
            prev = torch.is_grad_enabled()
            try:
                torch.set_grad_enabled(args[0].defaults["differentiable"])
                return func(*args, **kwargs)
            finally:
                torch.set_grad_enabled(prev)
        step.deferred_dynamo = True
        return step

    # graph_export's _Recorder (save_model's): TorchDispatchMode marks its __torch_dispatch__
    for name, module in list(sys.modules.items()):
        if module is None or not (name.startswith("torch.optim") or module is gx):
            continue
        for obj in list(vars(module).values()):
            for attr, f in (list(vars(obj).items()) if isinstance(obj, type) else [(None, obj)]):
                for mark in marks(f):
                    inner = getattr(mark, "__wrapped__", None)   # the marked function
                    if inner is not None and getattr(inner, "__dynamo_disable", None) is None:
                        setattr(inner, "__dynamo_disable", deferred(mark, inner))
                if attr is not None and getattr(f, "__code__", None) is grad_wrapper and hasattr(f, "__wrapped__"):
                    setattr(obj, attr, deferred_step(f))


def setup_device():
    """(device, autocast context). CUDA: bf16 autocast, TF32 matmuls, expandable allocator
    segments (the reference's); CPU: float32 on every core (AUTORESEARCH_THREADS overrides)."""
    defer_dynamo_import()
    if torch.cuda.is_available():
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before the first allocation
        torch.set_float32_matmul_precision("high")
        if torch.cuda.get_device_capability()[0] == 12:
            ensure_ptxas()
        return torch.device("cuda"), torch.amp.autocast("cuda", dtype=torch.bfloat16)
    torch.set_num_threads(int(os.environ.get("AUTORESEARCH_THREADS") or os.cpu_count() or 1))
    return torch.device("cpu"), contextlib.nullcontext()


def ptxas_version(path):
    """(major, minor) of a ptxas binary, or None when it does not run."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def ensure_ptxas():
    """Triton on sm_121a (GB10) needs a CUDA 13 ptxas: if TRITON_PTXAS_PATH is unset, point it at
    one whose `--version` says so. Returns the path in force, or None."""
    if os.environ.get("TRITON_PTXAS_PATH"):
        return os.environ["TRITON_PTXAS_PATH"]
    found = sorted(glob.glob("/usr/local/cuda-13*/bin/ptxas"), reverse=True) + glob.glob("/usr/local/cuda/bin/ptxas")
    path = next((p for p in found if (ptxas_version(p) or (0,)) >= (13, 0)), None)
    if path:
        os.environ["TRITON_PTXAS_PATH"] = path
        print(f"TRITON_PTXAS_PATH={path} (a CUDA 13 ptxas, for sm_12x)")
    else:
        print(f"warning: no CUDA 13 ptxas among {found or 'none found'}; Triton may fail on sm_12x "
              "(set TRITON_PTXAS_PATH; a compile failure then falls back to eager)")
    return path


PEAK_BF16_FLOPS = {  # dense bf16 tensor-core peak by exact torch.cuda.get_device_name(), for MFU
    "NVIDIA H100 80GB HBM3": 989.4e12,  # H100 SXM5 (NVIDIA H100 datasheet: 1,979 with sparsity)
    "NVIDIA H100 PCIe": 756.5e12,  # H100 PCIe (datasheet: 1,513 with sparsity)
    "NVIDIA H100 NVL": 835.5e12,  # H100 NVL, per GPU (datasheet: 1,671 with sparsity)
    "NVIDIA H200": 989.4e12,  # H200 SXM (H200 datasheet: 1,979 with sparsity)
    "NVIDIA H200 NVL": 835.5e12,  # H200 NVL (datasheet: 1,671 with sparsity)
    "NVIDIA GH200 480GB": 989.4e12,  # Grace Hopper superchip, its H100-class GPU
    "NVIDIA GH200 144G HBM3e": 989.4e12,  # the HBM3e GH200
    "NVIDIA A100-SXM4-40GB": 312e12,  # A100 datasheet: 312 dense, all A100 variants
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA B200": 2250e12,  # HGX B200 datasheet: 4.5 PF with sparsity per GPU
    "NVIDIA L40S": 362.05e12,  # L40S datasheet: 733 with sparsity
    "NVIDIA GeForce RTX 4090": 165.2e12,  # Ada whitepaper: bf16 with fp32 accumulate (what torch uses)
    "NVIDIA GeForce RTX 5090": 209.5e12,  # RTX Blackwell whitepaper: bf16 with fp32 accumulate
    # Not listed: GB10 (DGX Spark), for which NVIDIA publishes no dense bf16 figure ("1 PFLOP FP4
    # with sparsity" only): peak_flops() measures a GEMM instead.
}
GEMM_N, GEMM_ITERS = 8192, 10  # the measured peak where the table has none: bf16 8192^3 products


def peak_flops_for(name):
    """The table's figure for a device name (exact match, case and spacing ignored), else 0.0."""
    wanted = " ".join(name.split()).lower()
    return next((f for key, f in PEAK_BF16_FLOPS.items() if key.lower() == wanted), 0.0)


def measured_gemm_flops(device, n=GEMM_N, iters=GEMM_ITERS):
    """bf16 FLOP/s of an n^3 matrix product on `device`, after a warm-up."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(2):
        a @ b
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    torch.cuda.synchronize(device)
    return 2 * n ** 3 * iters / (time.perf_counter() - t0)


def peak_flops(device):
    """(peak FLOP/s for MFU, where it came from). CPU: (0, ...), so mfu_percent reads 0.00."""
    if device.type != "cuda":
        return 0.0, "none on CPU"
    name = torch.cuda.get_device_name(device)
    peak = peak_flops_for(name)
    if peak:
        return peak, f"table ({name})"
    peak = measured_gemm_flops(device)
    print(f"peak: no datasheet figure for {name!r}: MFU is against a measured bf16 GEMM, {peak / 1e12:.1f} TFLOPS")
    return peak, f"measured GEMM ({name})"


def mfu_percent(flops_per_step, steps, seconds, peak):
    """Model FLOPs utilisation of `steps` optimizer steps timed at `seconds`; 0 when not computable."""
    if not (peak > 0 and steps > 0 and seconds > 0):
        return 0.0
    return 100.0 * flops_per_step * steps / seconds / peak


def peak_memory_mb(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


# ---------------------------------------------------------------------------------------------
# Attention: attention.py, a fixed file beside this one (the backends, the cascade, the probe, FA3).
# ---------------------------------------------------------------------------------------------
attention = attn.attention            # what train.py calls, through this module as before
pick_attention = attn.pick_attention
_why = attn.one_line


# ---------------------------------------------------------------------------------------------
# Compile with an eager fallback.
# ---------------------------------------------------------------------------------------------
COMPILE_NOTES = attn.COMPILE_NOTES  # "name: reason" of every compile that failed and runs eagerly instead


def compiled(fn, name, enabled=True, trial=None):
    """torch.compile(fn, dynamic=False), or fn itself where that fails: one loud line, the reason
    kept in COMPILE_NOTES. A compile error surfaces at a call (the first, or a recompile): the
    call is then run eagerly and so are all later ones. trial(f): run f once now the way training
    will (a backward compiles lazily, at its first call), so both compile before the first step."""
    if not enabled:
        return fn
    fast = torch.compile(fn, dynamic=False)
    use = [fast]

    def fell_back(e):
        COMPILE_NOTES.append(f"{name}: {_why(e)}")
        print(f"COMPILE FAILED: {name} runs eagerly ({_why(e)})", flush=True)
        use[0] = fn
    if trial is not None:
        try:
            trial(fast)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:
            fell_back(e)
            return fn

    def call(*args, **kwargs):
        if use[0] is fast:
            try:
                return fast(*args, **kwargs)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:
                out = fn(*args, **kwargs)  # a bug of fn itself raises here, and is not called a compile failure
                fell_back(e)
                return out
        return fn(*args, **kwargs)
    return _AsModule(fn, call) if isinstance(fn, torch.nn.Module) else call


class _AsModule(torch.nn.Module):
    """compiled(module): still a module (evaluate_bpb reads its parameters), calling `call`."""

    def __init__(self, module, call):
        super().__init__()
        self.module, self.call = module, call

    def forward(self, *args, **kwargs):
        return self.call(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Training state at the pre-decay point (a promoted Hyperband survivor resumes from it).
# ---------------------------------------------------------------------------------------------

def _atomic_save(obj, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_state(path, model, optimizer, **extra):
    """Model, optimizer, RNG and the caller's `extra` (step, loader position, the batch fetched ahead)."""
    rng = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    _atomic_save(dict(extra, model=model.state_dict(), optimizer=optimizer.state_dict(), rng=rng), path)


def load_state(path, model, optimizer, device, config=None):
    """Load a save_state() file into model and optimizer, restore the RNG; returns the dict.
    Raises ValueError when it was saved for another model config."""
    state = torch.load(path, map_location=device, weights_only=False)
    if config is not None and state.get("config") != config:
        raise ValueError(f"the state was saved for another model: {state.get('config')} != {config}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["cpu"])
    if device.type == "cuda" and state["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state


# ---------------------------------------------------------------------------------------------
# Model graph: graph_export.py, a fixed file beside this one (the format, the recorder, save_model).
# ---------------------------------------------------------------------------------------------
GRAPH_FORMAT = gx.GRAPH_FORMAT
EVAL_BATCH_ENV = gx.EVAL_BATCH_ENV
ExportError = gx.ExportError
eval_batch = gx.eval_batch
record_graph = gx.record_graph
save_model = gx.save_model         # what train.py calls, through this module as before


# ---------------------------------------------------------------------------------------------
# Harness clock.
# ---------------------------------------------------------------------------------------------
# The harness's clock of this run (set by harness/runner.py), as JSON: {"started_at": its start
# (unix time), "startup_s": the startup it is never charged for (the tag's baseline's own)}.
CLOCK_ENV = "AUTORESEARCH_CLOCK"


def _clock():
    try:
        return json.loads(os.environ.get(CLOCK_ENV) or "null")
    except ValueError:
        return None


_LAST_CALL: dict = {}   # budget_spent's previous call: the interval between calls is a step's length


def budget_spent(first_step_at, budget, now=None):
    """True once the next step would end past the budget by the harness's clock, which charges the
    time since the first step line and whatever the startup (process start -> that line) took
    beyond the baseline's own: a slower first step or a cold compile is paid from the budget, so
    an honest run ends inside its limit whatever its startup. Called once per step, it takes the
    interval since its previous call as the step's length. Never true outside the loop.
    `first_step_at`: time.time() when step 1's line was printed."""
    clock = _clock()
    if not isinstance(clock, dict) or first_step_at is None:
        return False
    now = time.time() if now is None else now
    prev = _LAST_CALL.get(first_step_at)
    _LAST_CALL.clear()
    _LAST_CALL[first_step_at] = now
    step = max(0.0, now - prev) if prev is not None else 0.0
    started, credit = clock.get("started_at"), clock.get("startup_s")
    late = 0.0
    if isinstance(started, (int, float)) and isinstance(credit, (int, float)):
        late = max(0.0, first_step_at - started - credit)
    elif isinstance(started, (int, float)):   # no credit told: every second of its startup is its own to pay
        late = max(0.0, first_step_at - started)
    return (now - first_step_at) + late + step >= budget
