"""
GPU check, one command, a few minutes: uv run scripts/gpu_check.py [--train-seconds 60]

1. Lists which attention backends of train.py load on this device (fa3 via kernels, flex, sdpa, naive).
2. Checks each against a float64 reference on random bf16 inputs: full causal, sliding window, GQA,
   forward and backward.
3. Times each (forward+backward, compiled like training) at the gpu profile's shape.
4. Runs train.py for --train-seconds in the gpu profile (prepared data needed: `uv run prepare.py`)
   and prints its summary.
Without CUDA it says so, runs the CPU-available parts (backends load + agree with the reference)
and exits 0. Paste the output into docs/gpu.md.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import train  # noqa: E402

CASES = [  # (name, heads, kv heads, window as a fraction of T; -1 = full)
    ("causal", 8, 8, -1),
    ("window T/2", 8, 8, 0.5),
    ("GQA 8/2", 8, 2, -1),
    ("GQA window", 8, 2, 0.25),
]
BF16_TOLERANCE = 3e-2  # bf16 inputs and outputs: ~3 significant digits
TIMING_ITERS = 20


def reference(q, k, v, window):
    """float64 attention with an explicit mask (q [B,T,H,D], k/v [B,T,Hkv,D])."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    rep = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    T = q.size(2)
    i, j = torch.arange(T, device=q.device)[:, None], torch.arange(T, device=q.device)[None, :]
    allowed = (j <= i) & ((i - j <= window) if window >= 0 else True)
    s = (q @ k.transpose(-2, -1)) / q.size(-1) ** 0.5
    return (s.masked_fill(~allowed, float("-inf")).softmax(-1) @ v).transpose(1, 2)


def check_backend(name, device, T, D, compile_on):
    """Return (ok, worst error, ms per fwd+bwd, note)."""
    windows = sorted({-1 if f < 0 else int(T * f) for _, _, _, f in CASES})
    train.set_attention_backend(name, T, windows, device)
    fn = torch.compile(train.attend, dynamic=False) if compile_on else train.attend
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    worst, times = 0.0, []
    for case, h, hkv, frac in CASES:
        w = -1 if frac < 0 else int(T * frac)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, T, n, D, generator=g).to(device, dtype).requires_grad_() for n in (h, hkv, hkv))
        train_on_cpu = not (device.type == "cpu" and name == "flex")  # no flex backward on CPU
        if not train_on_cpu:
            q, k, v = (t.detach() for t in (q, k, v))
        out = fn(q, k, v, w)
        worst = max(worst, (out.double() - reference(q, k, v, w)).abs().max().item())
        if train_on_cpu:
            out.float().square().mean().backward()
        if device.type == "cuda":  # timing: fwd+bwd, after the warm-up above
            torch.cuda.synchronize()
            t0 = time.time()
            for _ in range(TIMING_ITERS):
                fn(q, k, v, w).float().square().mean().backward()
            torch.cuda.synchronize()
            times.append((time.time() - t0) / TIMING_ITERS * 1000)
    ms = sum(times) / len(times) if times else float("nan")
    return worst < BF16_TOLERANCE, worst, ms


def main():
    parser = argparse.ArgumentParser(description="Check train.py's attention backends and a short GPU run.")
    parser.add_argument("--train-seconds", type=int, default=60)
    parser.add_argument("--no-compile", action="store_true", help="check the backends eagerly")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        cc = torch.cuda.get_device_capability()
        print(f"device: {torch.cuda.get_device_name()} (sm_{cc[0]}{cc[1]}), torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}")
        if cc[0] == 12:
            train.ensure_ptxas()
        T, D, compile_on = 2048, 64, not args.no_compile
    else:
        print(f"device: no CUDA on this machine (torch {torch.__version__}); running the CPU parts only")
        T, D, compile_on = 64, 16, False
    print(f"train.py cascade here: {' -> '.join(train.attention_candidates(device))}\n")
    print(f"{'backend':<8} {'loads':<6} {'max err vs f64':>15} {'ok':<4} {'ms fwd+bwd':>11}  note")
    results = {}
    for name in ["fa3", "flex", "sdpa", "naive"]:
        try:
            ok, err, ms = check_backend(name, device, T, D, compile_on)
            results[name] = ok
            print(f"{name:<8} {'yes':<6} {err:>15.2e} {'yes' if ok else 'NO':<4} {ms:>11.2f}", flush=True)
        except Exception as e:  # report every failure and keep going
            results[name] = None
            reason = str(e).splitlines()[0][:90] if str(e) else ""
            print(f"{name:<8} {'no':<6} {'':>15} {'':<4} {'':>11}  {type(e).__name__}: {reason}", flush=True)
        finally:
            train.set_attention_backend("sdpa")
    if not cuda:
        bad = [n for n, ok in results.items() if ok is False]
        print("\nno CUDA: skipped the timings and the gpu-profile training run.")
        return 1 if bad else 0
    print(f"\ntrain.py, gpu profile, {args.train_seconds} s:")
    env = dict(os.environ, AUTORESEARCH_PROFILE="gpu", AUTORESEARCH_TIME_BUDGET=str(args.train_seconds))
    proc = subprocess.run([sys.executable, "train.py"], cwd=REPO, env=env, capture_output=True, text=True)
    out = proc.stdout
    tail = out[out.rfind("\n---\n") + 1:] if "\n---\n" in out else out[-3000:] + proc.stderr[-3000:]
    print("\n".join(ln for ln in out.splitlines() if ln.startswith(("attention:", "profile", "params"))))
    print(tail)
    print(f"train.py exit code {proc.returncode}")
    return 0 if proc.returncode == 0 and all(ok is not False for ok in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
