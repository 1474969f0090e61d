"""Sample text from a kept commit's model with a KV cache, streaming it as it comes.

    uv run inference/generate.py --run .autoresearch/<tag> [--commit C] [--prompt TEXT]
        [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]

Without --commit the best kept commit (lowest trusted val_bpb) is used. Temperature 0 is greedy.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from inference.kvcache import KVCache, forward_cached
from inference.runs import load_kept, run_tokenizer

# When the context is full, the cache is rebuilt from this fraction of it (the most recent
# tokens): a re-prefill every quarter context instead of every token, like a cropped full forward.
CONTEXT_KEEP_FRAC = 0.75


# Torch threads on CPU unless AUTORESEARCH_THREADS says otherwise: decoding small models is
# per-op overhead bound, and on the shared 2-core box 2 threads thrashed (bench: 13 tok/s at 2
# threads vs 143 tok/s at 1, tiny profile, load ~7).
DEFAULT_CPU_THREADS = 1


def pick_device(name: str = "auto") -> torch.device:
    """The device; on CPU, torch threads from AUTORESEARCH_THREADS, else DEFAULT_CPU_THREADS."""
    import os
    torch.set_num_threads(int(os.environ.get("AUTORESEARCH_THREADS") or DEFAULT_CPU_THREADS))
    if name != "auto":
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA, as train.py trains there; plain float32 elsewhere."""
    if device.type == "cuda":
        return torch.amp.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sample_next(logits: torch.Tensor, temperature: float, top_k: int | None, generator=None) -> torch.Tensor:
    """Next token ids [B] from last-position logits [B, V]; temperature <= 0 is greedy."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits.float(), dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class Decoder:
    """A model with its cache: prefill, then one token at a time, re-prefilling when full."""

    def __init__(self, model, train_module, batch_tokens: torch.Tensor, slack: int = 0):
        self.model, self.mod, self.slack = model, train_module, slack
        self.context = model.cos.size(1)
        self.tokens = batch_tokens  # [B, T] every token so far
        self.cache = None

    def prefill(self) -> torch.Tensor:
        """(Re)build the cache from the most recent tokens; logits [B, V] of the last one."""
        self.cache = KVCache(self.model, self.slack)
        keep = self.tokens[:, -max(1, int(self.context * CONTEXT_KEEP_FRAC)):] \
            if self.tokens.size(1) > self.context else self.tokens
        return forward_cached(self.model, keep, self.cache, self.mod)[:, -1]

    def step(self, new: torch.Tensor) -> torch.Tensor:
        """Append tokens new [B] and return the next logits [B, V]."""
        self.tokens = torch.cat([self.tokens, new[:, None]], dim=1)
        if self.cache.pos >= self.context:
            return self.prefill()
        return forward_cached(self.model, new[:, None], self.cache, self.mod)[:, -1]


@torch.no_grad()
def generate(model, train_module, prompt_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, generator=None, on_token=None) -> torch.Tensor:
    """New tokens [B, N] after prompt_ids [B, T]; on_token(ids [B]) is called after each one."""
    dec = Decoder(model, train_module, prompt_ids)
    logits = dec.prefill()
    out = []
    for i in range(max_new_tokens):
        nxt = sample_next(logits, temperature, top_k, generator)
        out.append(nxt)
        if on_token:
            on_token(nxt)
        if i + 1 < max_new_tokens:
            logits = dec.step(nxt)
    return torch.stack(out, dim=1) if out else prompt_ids[:, :0]


class Streamer:
    """Prints decoded text as tokens arrive, holding back a split UTF-8 character."""

    def __init__(self, tokenizer, out=None):
        self.tok, self.out, self.ids, self.shown = tokenizer, out or sys.stdout, [], 0

    def __call__(self, nxt: torch.Tensor):
        self.ids.append(int(nxt[0]))
        text = self.tok.decode(self.ids)
        if text.endswith("\ufffd"):
            return
        self.out.write(text[self.shown:])
        self.out.flush()
        self.shown = len(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--run", required=True, type=Path, help="the run folder (the tag's worktree)")
    p.add_argument("--commit", help="a kept commit (prefix); default the best kept")
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    a = p.parse_args(argv)
    device = pick_device(a.device)
    model, kept, mod = load_kept(a.run, a.commit, device)
    tok = run_tokenizer(a.run)
    ids = torch.tensor([tok.encode(a.prompt, prepend=tok.get_bos_token_id())], device=device)
    print(f"# {kept.short} (exp {kept.n}, val_bpb {kept.val_bpb}) on {device}: {kept.description}", file=sys.stderr)
    sys.stdout.write(a.prompt)
    gen = torch.Generator(device=device).manual_seed(a.seed)
    t0 = time.perf_counter()
    with autocast_for(device):
        out = generate(model, mod, ids, a.max_new_tokens, a.temperature, a.top_k, gen, Streamer(tok))
    dt = time.perf_counter() - t0
    print(f"\n# {out.size(1)} tokens in {dt:.2f}s ({out.size(1) / max(dt, 1e-9):.1f} tok/s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
