"""Speculative decoding (greedy): a small draft model proposes k tokens, the target checks them in
one forward pass and keeps the longest agreeing prefix plus its own next token. The output is the
target's own greedy output, token for token; the gain is fewer sequential target passes.

    uv run inference/speculative.py --run DIR --target C --draft D [--prompt TEXT]
        [--max-new-tokens N] [--ks 1,2,...,8]
    uv run inference/speculative.py --target-artifact M --target-train T --draft-artifact M2
        --draft-train T2 [--out F]     # models outside a run (scripts/pipeline.sh --full)

Prints, per k: acceptance rate (accepted / proposed draft tokens), mean accepted length (draft
tokens kept per round), tokens per target pass and the speedup over the target decoding alone;
writes <run>/bench/speculative-<target>-<draft>.json. Both models must share the tokenizer (all
of a run's commits do). Decoding stays within the target's context (no re-prefill here).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from inference.generate import autocast_for, generate, pick_device
from inference.kvcache import KVCache, forward_cached
from inference.runs import REPO, Kept, import_source, load_artifact_model, load_kept, run_tokenizer

KS = tuple(range(1, 9))  # draft lengths tried: k = 1..8


@dataclass
class SpecStats:
    k: int
    rounds: int = 0         # target verification passes
    proposed: int = 0       # draft tokens proposed
    accepted: int = 0       # draft tokens the target agreed with
    seconds: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0


@torch.no_grad()
def speculative_generate(target, tmod, draft, dmod, prompt: torch.Tensor, max_new_tokens: int, k: int):
    """(new tokens [1, N], SpecStats): greedy speculative decoding of prompt [1, T]."""
    context = min(target.cos.size(1), draft.cos.size(1))
    max_new_tokens = min(max_new_tokens, context - prompt.size(1))
    stats = SpecStats(k)
    tc, dc = KVCache(target, slack=k + 1), KVCache(draft, slack=k + 1)
    if prompt.size(1) > 1:  # both caches hold everything but `cur`, the newest token
        forward_cached(target, prompt[:, :-1], tc, tmod)
        forward_cached(draft, prompt[:, :-1], dc, dmod)
    cur, out = prompt[:, -1:], []
    t0 = time.perf_counter()
    while len(out) < max_new_tokens:
        kk = max(0, min(k, context - tc.pos - 1, max_new_tokens - len(out) - 1))
        proposal, x = [], cur
        for _ in range(kk):
            x = forward_cached(draft, x, dc, dmod)[:, -1].argmax(-1, keepdim=True)
            proposal.append(x)
        guesses = torch.cat([cur] + proposal, dim=1)  # cur, d1..dk
        p0 = tc.pos
        greedy = forward_cached(target, guesses, tc, tmod).argmax(-1)  # target's choice after each
        a = 0
        while a < kk and int(greedy[0, a]) == int(guesses[0, a + 1]):
            a += 1
        out.extend(int(t) for t in guesses[0, 1:a + 1])
        out.append(int(greedy[0, a]))  # the target's own token after the agreed prefix
        tc.truncate(p0 + 1 + a)  # keep cur, d1..da
        if a == kk:  # the draft never saw its last guess (or, with kk = 0, cur itself)
            forward_cached(draft, guesses[:, -1:], dc, dmod)
        dc.truncate(p0 + 1 + a)
        cur = greedy[:, a:a + 1]
        stats.rounds += 1
        stats.proposed += kk
        stats.accepted += a
    stats.seconds = time.perf_counter() - t0
    return torch.tensor([out[:max_new_tokens]], device=prompt.device), stats


def target_alone(target, tmod, prompt, max_new_tokens):
    """(tokens, seconds) of the target's plain greedy KV-cached decoding."""
    t0 = time.perf_counter()
    out = generate(target, tmod, prompt, max_new_tokens, temperature=0.0)
    return out, time.perf_counter() - t0


def load_side(a, which: str, device):
    """(model, Kept, train module) of the target or draft: an artifact file, else a run's commit."""
    art = getattr(a, f"{which}_artifact")
    if art is None:
        if a.run is None or (which == "draft" and not a.draft):
            raise SystemExit(f"--{which} needs --run (and a commit), or --{which}-artifact")
        return load_kept(a.run, getattr(a, which), device, kept_only=which == "target")
    mod = import_source(Path(getattr(a, f"{which}_train")).read_text(), f"train_{which}")
    model, _ = load_artifact_model(art, mod, device)
    label = art.resolve().parent.name  # e.g. exp-0001, draft
    return model, Kept(0, str(art), label, None, str(art), art), mod


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--run", type=Path, help="the run folder (the tag's worktree)")
    p.add_argument("--target", help="kept commit of the target (default the best kept)")
    p.add_argument("--draft", help="commit of the draft model (any experiment with a saved model)")
    for which in ("target", "draft"):  # models outside a run: the pipeline's winner, a sweep's draft
        p.add_argument(f"--{which}-artifact", type=Path, help=f"model.pt of the {which} (instead of a commit)")
        p.add_argument(f"--{which}-train", type=Path, default=REPO / "train.py", help=f"the train.py of --{which}-artifact")
    p.add_argument("--out", type=Path, help="report path (default <run>/bench/speculative-<target>-<draft>.json)")
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--ks", default=",".join(map(str, KS)), help="draft lengths to try, comma-separated")
    p.add_argument("--device", default="auto")
    a = p.parse_args(argv)
    device = pick_device(a.device)
    target, tk, tmod = load_side(a, "target", device)
    draft, dk, dmod = load_side(a, "draft", device)  # any experiment whose model survives
    tok = run_tokenizer(a.run) if a.run else __import__("prepare").Tokenizer.from_directory()
    prompt = torch.tensor([tok.encode(a.prompt, prepend=tok.get_bos_token_id())], device=device)
    n = min(a.max_new_tokens, target.cos.size(1) - prompt.size(1))
    with autocast_for(device):
        target_alone(target, tmod, prompt, 4)  # warm-up
        ref, base_s = target_alone(target, tmod, prompt, n)
        rows = []
        exp = [f" (exp {k.n})" if k.n else "" for k in (tk, dk)]
        print(f"target {tk.short}{exp[0]} draft {dk.short}{exp[1]}: {n} tokens, "
              f"target alone {n / base_s:.1f} tok/s")
        for k in (int(x) for x in a.ks.split(",")):
            out, st = speculative_generate(target, tmod, draft, dmod, prompt, n, k)
            same = out.tolist() == ref.tolist()
            row = {**asdict(st), "acceptance_rate": st.acceptance_rate, "mean_accepted": st.mean_accepted,
                   "tokens_per_target_pass": n / max(st.rounds, 1), "speedup": base_s / max(st.seconds, 1e-9),
                   "identical_to_target": same}
            rows.append(row)
            print(f"k={k} | acceptance {row['acceptance_rate']:.2f} | mean accepted {row['mean_accepted']:.2f} | "
                  f"{row['tokens_per_target_pass']:.2f} tok/target pass | speedup {row['speedup']:.2f}x | "
                  f"identical {same}", flush=True)
    report = {"target": tk.commit, "draft": dk.commit, "tokens": n, "target_alone_tok_s": n / base_s,
              "text": tok.decode(ref[0].tolist()), "by_k": rows}
    path = a.out or Path(a.run or REPO / "out") / "bench" / f"speculative-{tk.short}-{dk.short}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(r["identical_to_target"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
