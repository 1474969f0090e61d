"""
CPU train-step throughput of train.py's model in the cpu profile (its knob values written in, as a
cpu tag's base commit has them), so that the cpu profile's runtime choices (COMPILE off, float32,
all cores, the attention backend) come from figures.

Usage: uv run scripts/bench_cpu.py [--seconds 3] [--threads 1,2] [--no-compile]

Each cell builds the model, runs a few warm-up steps (that is where torch.compile compiles) and
then times full training steps (forward, backward, Muon+AdamW step) for --seconds. Random token
ids: throughput does not depend on the data, so no prepared cache is needed. Figures taken on a
shared, busy machine are noisy: compare cells of one run, not runs.
"""

import argparse
import contextlib
import itertools
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("AUTORESEARCH_PROFILE", "cpu")  # before prepare is imported (via train)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import prepare  # noqa: E402
import runtime  # noqa: E402
from search.knobs import load_train  # noqa: E402

train = load_train(prepare.PROFILE)  # train.py with the profile's knob values (runtime.PROFILE_KNOBS)

WARMUP_STEPS = 2  # untimed steps per cell (compilation happens here)


def bench_cell(compile_on, backend, bf16, threads, seconds):
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    torch.manual_seed(0)
    V, T = prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN
    cfg = train.model_config(V, T)
    model = train.build_model(cfg)
    runtime.attn.set_backend(backend, T, model.windows, torch.device("cpu"))
    optimizer = train.MuonAdamW(model)
    rows = train.DEVICE_BATCH_SIZE
    autocast = torch.amp.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def loss_fn(x, y):
        return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))

    step_loss = torch.compile(loss_fn, dynamic=False) if compile_on else loss_fn
    gen = torch.Generator().manual_seed(0)

    def step():
        x = torch.randint(0, V, (rows, T), generator=gen)
        with autocast:
            loss = step_loss(x, torch.roll(x, -1, 1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    t0 = time.time()
    for _ in range(WARMUP_STEPS):
        step()
    warmup = time.time() - t0
    steps, t0 = 0, time.time()
    while time.time() - t0 < seconds or steps < 2:
        step()
        steps += 1
    return rows * T * steps / (time.time() - t0), warmup, cfg


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1], allow_abbrev=False)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per cell")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile cells (slow to build)")
    parser.add_argument("--backends", default="sdpa,naive", help="attention backends to try")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    compiles = [False] if args.no_compile else [False, True]
    rows = []
    print(f"profile {prepare.PROFILE}: T={prepare.MAX_SEQ_LEN} V={prepare.VOCAB_SIZE}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}")
    for compile_on, backend, bf16, n in itertools.product(compiles, args.backends.split(","), [False, True], threads):
        label = f"compile={'on' if compile_on else 'off'} attn={backend} dtype={'bf16' if bf16 else 'fp32'} threads={n}"
        try:
            tok_s, warmup, cfg = bench_cell(compile_on, backend, bf16, n, args.seconds)
            rows.append((compile_on, backend, bf16, n, tok_s, warmup))
            print(f"{label:<55} {tok_s:>10,.0f} tok/s   warm-up {warmup:6.1f}s", flush=True)
        except Exception as e:  # a cell that cannot run (no compiler, no bf16 kernel) is reported
            print(f"{label:<55} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
    if rows:
        best = max(rows, key=lambda r: r[4])
        print(f"\nmodel: {cfg['n_layer']} layers, width {cfg['n_embd']}, {train.DEVICE_BATCH_SIZE} rows/step")
        print(f"fastest: compile={'on' if best[0] else 'off'} attn={best[1]} dtype={'bf16' if best[2] else 'fp32'} "
              f"threads={best[3]}: {best[4]:,.0f} tok/s")


if __name__ == "__main__":
    main()
