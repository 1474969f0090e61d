"""GRPO (group-relative policy optimisation) of a kept model on small-number addition.

    uv run lab/grpo.py --run DIR [--commit C] [--quick] [--steps N]

The task is verifiable in plain text: a few solved examples, then "a+b=" with one-digit a and b;
the reward is 1 for an exact answer on the first line, FORMAT_REWARD for a wrong number, else 0
(accuracy counts exact answers only). Each step samples a group of G
answers per prompt, scores them, normalises the rewards within the group (the advantage), and
follows the policy gradient of the answer tokens, minus beta x KL to the start model (the k3
estimator per token). One update per batch, so the policy ratio is 1 and needs no clipping.
Accuracy is measured greedily on held-out sums (pairs never trained on), before and after.
Writes <run>/out/grpo/grpo-<short>.json (and the tuned model beside it).
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from inference.generate import Decoder, pick_device, sample_next
from inference.runs import load_kept, run_tokenizer

SHOTS = ((3, 4), (1, 5), (6, 2))  # the solved examples every prompt starts with (never held out)
HELD_OUT = 20  # one-digit pairs kept for the before/after accuracy
ANSWER_TOKENS = 3  # tokens sampled per answer: two digits and a newline at most
GROUP = 8  # answers per prompt: the group whose mean and spread make the advantage
PROMPTS_PER_STEP = 4
BETA = 0.05  # weight of the KL to the start model: keeps the policy near what it was
LR = 1e-3  # AdamW on every weight (tiny models move slowly at 1e-4: reward stayed ~0 over 30 steps)
TEMPERATURE = 1.0
# Partial reward for an answer that is a number but wrong: a model trained for seconds rarely
# writes the right digit, so exact match alone leaves every group equal and the gradient zero.
FORMAT_REWARD = 0.1
STEPS, QUICK_STEPS = 60, 12


def pairs(seed=0) -> tuple[list, list]:
    """(train pairs, held-out pairs) of one-digit addends; the shots are never held out."""
    every = [(a, b) for a in range(10) for b in range(10) if (a, b) not in SHOTS]
    random.Random(seed).shuffle(every)
    return every[HELD_OUT:], every[:HELD_OUT]


def prompt_text(a: int, b: int) -> str:
    return "".join(f"{x}+{y}={x + y}\n" for x, y in SHOTS) + f"{a}+{b}="


def reward(completion: str, answer: str) -> float:
    """1.0 when the first line of the completion is exactly the answer (spaces around ignored),
    FORMAT_REWARD when it is another number, else 0."""
    line = completion.split("\n", 1)[0].strip()
    if line == answer:
        return 1.0
    return FORMAT_REWARD if line.isdigit() and line.isascii() else 0.0


def answer_mask(tok, completions: torch.Tensor) -> torch.Tensor:
    """1 for answer tokens up to and including the one that ends the line, 0 after it."""
    mask = torch.ones_like(completions, dtype=torch.float32)
    for i, row in enumerate(completions.tolist()):
        for j in range(len(row)):
            if "\n" in tok.decode(row[:j + 1]):
                mask[i, j + 1:] = 0
                break
    return mask


@torch.no_grad()
def sample(model, mod, prompt_ids: torch.Tensor, n: int, temperature: float, gen) -> torch.Tensor:
    """n answers [n, ANSWER_TOKENS] to one prompt (a batch sharing the prompt's cache)."""
    dec = Decoder(model, mod, prompt_ids.repeat(n, 1))
    logits, out = dec.prefill(), []
    for i in range(ANSWER_TOKENS):
        nxt = sample_next(logits, temperature, None, gen)
        out.append(nxt)
        if i + 1 < ANSWER_TOKENS:
            logits = dec.step(nxt)
    return torch.stack(out, dim=1)


def token_logprobs(model, seq: torch.Tensor, n_answer: int) -> torch.Tensor:
    """Log-probabilities [B, n_answer] of the last n_answer tokens of seq [B, T]."""
    logits = model(seq[:, :-1])[:, -n_answer:]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, seq[:, -n_answer:, None]).squeeze(-1)


def accuracy(model, mod, tok, held, device) -> float:
    hits = 0
    for a, b in held:
        ids = torch.tensor([tok.encode(prompt_text(a, b), prepend=tok.get_bos_token_id())], device=device)
        out = sample(model, mod, ids, 1, 0.0, None)
        hits += reward(tok.decode(out[0].tolist()), str(a + b)) == 1.0
    return hits / len(held)


def grpo_step(policy, ref, mod, tok, opt, batch, device, gen) -> dict:
    """One GRPO update on `batch` pairs; returns mean reward, KL and loss."""
    losses, rewards, kls = [], [], []
    opt.zero_grad()
    for a, b in batch:
        ids = torch.tensor([tok.encode(prompt_text(a, b), prepend=tok.get_bos_token_id())], device=device)
        answers = sample(policy, mod, ids, GROUP, TEMPERATURE, gen)
        r = torch.tensor([reward(tok.decode(row), str(a + b)) for row in answers.tolist()], device=device)
        adv = (r - r.mean()) / (r.std() + 1e-4)  # group-relative: all equal -> no signal
        seq = torch.cat([ids.repeat(GROUP, 1), answers], dim=1)
        mask = answer_mask(tok, answers).to(device)
        lp = token_logprobs(policy, seq, ANSWER_TOKENS)
        with torch.no_grad():
            ref_lp = token_logprobs(ref, seq, ANSWER_TOKENS)
        d = ref_lp - lp
        kl = (torch.exp(d) - d - 1) * mask  # k3: unbiased, always >= 0
        per_seq = ((-adv[:, None] * lp + BETA * kl) * mask).sum(1) / mask.sum(1)
        loss = per_seq.mean() / len(batch)
        loss.backward()
        losses.append(float(loss.detach()) * len(batch))
        rewards.append(float(r.mean()))
        kls.append(float(kl.detach().sum() / mask.sum()))
    opt.step()
    n = len(batch)
    return {"reward": sum(rewards) / n, "kl": sum(kls) / n, "loss": sum(losses) / n}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--commit", help="kept commit (default the best kept)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps")
    p.add_argument("--steps", type=int)
    p.add_argument("--eval", type=int, default=HELD_OUT, help="held-out sums measured (at most HELD_OUT)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    a = p.parse_args(argv)
    device = pick_device(a.device)
    torch.manual_seed(a.seed)
    policy, kept, mod = load_kept(a.run, a.commit, device)
    ref = copy.deepcopy(policy).eval()
    for q in ref.parameters():
        q.requires_grad_(False)
    tok = run_tokenizer(a.run)
    train_pairs, held = pairs(a.seed)
    held = held[:a.eval]
    steps = a.steps or (QUICK_STEPS if a.quick else STEPS)
    gen = torch.Generator(device=device).manual_seed(a.seed)
    rng = random.Random(a.seed)
    t0 = time.time()
    before = accuracy(policy, mod, tok, held, device)
    print(f"{kept.short} (exp {kept.n}): held-out accuracy before {before:.2f} ({len(held)} sums)", flush=True)
    opt = torch.optim.AdamW(policy.parameters(), lr=LR, weight_decay=0.0)
    log = []
    for step in range(1, steps + 1):
        policy.train()
        s = grpo_step(policy, ref, mod, tok, opt, rng.sample(train_pairs, PROMPTS_PER_STEP), device, gen)
        policy.eval()
        log.append({"step": step, **s})
        print(f"step {step:3d} | reward {s['reward']:.3f} | kl {s['kl']:.5f} | loss {s['loss']:+.4f}", flush=True)
    after = accuracy(policy, mod, tok, held, device)
    print(f"held-out accuracy before {before:.2f} -> after {after:.2f} | {time.time() - t0:.0f}s")
    out = Path(a.run) / "out" / "grpo" / f"grpo-{kept.short}.json"  # out/: a run file the loop keeps
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": kept.commit, "task": "one-digit addition, exact match", "steps": steps,
                               "group": GROUP, "beta": BETA, "lr": LR, "accuracy_before": before,
                               "accuracy_after": after, "held_out": held, "log": log,
                               "seconds": time.time() - t0}, indent=1) + "\n")
    torch.save({"config": policy.cfg, "state_dict": {k: v.detach().cpu() for k, v in policy.state_dict().items()}},
               out.with_suffix(".pt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
