"""Serving benchmark of kept commits: prefill and decode speed, KV-cache size, parameters, memory.

    uv run inference/bench.py --run DIR [--commit C | --all-kept]
    uv run inference/bench.py --artifact model.pt [--train train.py] [--out bench.json]

Writes <run>/bench/<short>.json per commit and prints one line per commit. Timings are the best
of a few repeats (the least disturbed by other processes on a shared machine). KV bytes per token
are also given analytically from the config (`kv_bytes_per_token`), the deterministic figure the
judge uses; the measured one is the cache's bytes after the decode over its positions.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from inference.generate import autocast_for, pick_device
from inference.kvcache import KVCache, forward_cached, kv_bytes_per_token
from inference.runs import REPO, Kept, find_kept, import_source, kept_commits, load_artifact_model, load_kept

REPEATS = 3  # timings are the best of this many: the least disturbed by the shared machine
DECODE_STEPS = 64  # tokens decoded per timing (capped by the context left after the prompt)
DECODE_PROMPT_FRAC = 0.25  # decode starts after a prompt of this fraction of the context
BATCHES = (1, 8)  # decode batch sizes: one stream, and a small serving batch


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _best(fn, device, repeats=REPEATS) -> float:
    """Best wall time of fn() over `repeats` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def _peak_mb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # max RSS of this process (Linux kB)


@torch.no_grad()
def bench_model(model, train_module, device, repeats=REPEATS) -> dict:
    """The serving figures of one model (see the module docstring)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    cfg, T = model.cfg, model.cos.size(1)
    V = cfg["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    prompt_len = max(1, int(T * DECODE_PROMPT_FRAC))
    steps = max(1, min(DECODE_STEPS, T - prompt_len))
    full = torch.randint(0, V, (1, T), generator=gen).to(device)
    out = {"context": T}
    with autocast_for(device):
        dt = _best(lambda: forward_cached(model, full, KVCache(model), train_module), device, repeats)
        out["prefill_tok_s"] = T / dt
        for B in BATCHES:
            prompt = torch.randint(0, V, (B, prompt_len), generator=gen).to(device)
            state = {}

            def decode():
                cache = KVCache(model)
                logits = forward_cached(model, prompt, cache, train_module)[:, -1]
                _sync(device)
                t0 = time.perf_counter()
                for _ in range(steps):
                    logits = forward_cached(model, logits.argmax(-1, keepdim=True), cache, train_module)[:, -1]
                _sync(device)
                state.setdefault("times", []).append(time.perf_counter() - t0)
                state["cache"] = cache
            for _ in range(repeats + 1):
                decode()
            t = min(state["times"][1:])
            out[f"decode_tok_s_b{B}"] = B * steps / t
            out[f"ms_per_token_b{B}"] = 1000 * t / steps
            cache = state["cache"]
            if B == 1:
                elem = cache.k[0].element_size()
                out["kv_bytes_per_token_measured"] = cache.nbytes() / cache.pos
                out["kv_bytes_per_token"] = kv_bytes_per_token(cfg, dtype_bytes=elem)
                out["kv_dtype_bytes"] = elem
    out["decode_steps"], out["decode_prompt"] = steps, prompt_len
    out["params"] = sum(p.numel() for p in model.parameters())
    out["peak_memory_mb"] = _peak_mb(device)
    out["peak_memory_kind"] = "cuda max allocated" if device.type == "cuda" else "process max RSS"
    out["device"] = str(device)
    return out


def line(label: str, r: dict) -> str:
    return (f"{label} | params {r['params'] / 1e6:.2f}M | prefill {r['prefill_tok_s']:,.0f} tok/s | "
            f"decode b1 {r['decode_tok_s_b1']:,.0f} tok/s ({r['ms_per_token_b1']:.2f} ms/tok) "
            f"b8 {r['decode_tok_s_b8']:,.0f} tok/s | kv {r['kv_bytes_per_token']:,.0f} B/tok | "
            f"peak {r['peak_memory_mb']:,.0f} MB")


def bench_kept(run_dir: Path, kept: Kept, device, repeats=REPEATS) -> dict:
    model, kept, mod = load_kept(run_dir, kept.commit, device)
    r = bench_model(model, mod, device, repeats)
    r.update(commit=kept.commit, short=kept.short, n=kept.n, val_bpb=kept.val_bpb, description=kept.description)
    out = Path(run_dir) / "bench" / f"{kept.short}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(r, indent=1) + "\n")
    return r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--run", type=Path, help="the run folder (the tag's worktree)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--commit", help="a kept commit (prefix); default the best kept")
    g.add_argument("--all-kept", action="store_true", help="every kept commit with a saved model")
    p.add_argument("--artifact", type=Path, help="a model.pt outside a run (e.g. the pipeline's winner)")
    p.add_argument("--train", type=Path, default=REPO / "train.py", help="the train.py that built --artifact")
    p.add_argument("--out", type=Path, help="JSON path for --artifact")
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=REPEATS, help="timed repeats (best counts)")
    a = p.parse_args(argv)
    device = pick_device(a.device)
    if a.artifact:
        mod = import_source(a.train.read_text(), "train_bench")
        model, _ = load_artifact_model(a.artifact, mod, device)
        r = bench_model(model, mod, device, a.repeats)
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(r, indent=1) + "\n")
        print(line(a.artifact.name, r))
        return 0
    if not a.run:
        p.error("--run or --artifact is required")
    targets = [k for k in kept_commits(a.run) if k.artifact.exists()] if a.all_kept else [find_kept(a.run, a.commit)]
    for kept in targets:
        r = bench_kept(a.run, kept, device, a.repeats)
        bpb = f"{kept.val_bpb:.4f}" if kept.val_bpb is not None else "-"
        print(line(f"{kept.short} exp {kept.n} val_bpb {bpb}", r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
