"""Data flywheel: does self-generated text help? A generator writes continuations of real-text
prefixes, filter gates keep the survivors, and for each mix ratio two identically seeded models
are trained for the same steps, on real-only and on mixed data, and compared on the real
validation set.

    uv run lab/flywheel.py run [--quick] [--run DIR [--commit C]] [--out DIR] [--ratios 0.1,0.3]

The generator is a kept model of a loop run (--run), or else train.py itself trained for
GEN_STEPS steps (AUTORESEARCH_STEPS, saved through AUTORESEARCH_ARTIFACT, as the harness runs it).
Gates: degenerate repetition (repeated token 4-grams), low diversity (distinct tokens), and
near-duplicates (character-shingle Jaccard against earlier survivors or the seed itself), and with
ANTHROPIC_API_KEY a majority vote of a small Claude judge ensemble (lab/claude_gate.py). The
comparison models are train.py's build_model at the prepared profile, trained with plain AdamW
on random windows of the token streams (a fixed-seed sampler: both arms see the same real rows
wherever the mixed arm does not draw a synthetic one). Verdict per ratio from the relative change
of validation loss: gain below -VERDICT_MARGIN, collapse above +VERDICT_MARGIN, else neutral.
Writes <out>/flywheel_report.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent

VERDICT_MARGIN = 0.02  # +-2% relative validation loss: a smaller change is called neutral
REPEAT_MAX = 0.5  # at most this fraction of a continuation's token 4-grams may be repeats
DIVERSITY_MIN = 0.25  # distinct tokens / tokens at least this (a loop of a few tokens fails)
NEAR_DUP_MAX = 0.7  # character 5-gram Jaccard above this to a survivor or the seed: a duplicate
NGRAM, SHINGLE = 4, 5
# Sizes: (full, quick). Quick stays well under 10 minutes on 2 cores at the tiny profile.
SEEDS = (64, 24)  # real prefixes continued
SEED_FRAC = 0.25  # prefix length as a fraction of the context
TRAIN_STEPS = (300, 60)  # steps of each compared model
GEN_STEPS = (200, 30)  # train.py steps of the generator when no --run is given
RATIOS = ((0.1, 0.3, 0.5), (0.3,))  # fraction of training rows drawn from the synthetic stream
BATCH = 8  # rows per step of the compared models
LR = 2e-3  # AdamW, constant: the same for both arms, so only the data differs
EVAL_WINDOWS = 64  # validation windows (the first ones of the real validation stream)
MAX_DOCS = 4000  # real training documents read at most


def ngram_repetition(tokens: list[int], n: int = NGRAM) -> float:
    """Fraction of n-grams that repeat an earlier one (0 = none, near 1 = a loop)."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def diversity(tokens: list[int]) -> float:
    return len(set(tokens)) / len(tokens) if tokens else 0.0


def shingles(text: str, k: int = SHINGLE) -> set:
    return {text[i:i + k] for i in range(max(1, len(text) - k + 1))}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def gate(samples: list[dict]) -> tuple[list[dict], dict]:
    """(survivors, rejections per gate). A sample: {"seed": text, "text": continuation, "tokens": ids}."""
    counts = {"empty": 0, "repetition": 0, "low_diversity": 0, "near_duplicate": 0}
    kept, kept_sh = [], []
    for s in samples:
        toks = s["tokens"]
        if not s["text"].strip() or not toks:
            counts["empty"] += 1
        elif ngram_repetition(toks) > REPEAT_MAX:
            counts["repetition"] += 1
        elif diversity(toks) < DIVERSITY_MIN:
            counts["low_diversity"] += 1
        else:
            sh = shingles(s["text"])
            if jaccard(sh, shingles(s["seed"])) > NEAR_DUP_MAX or any(jaccard(sh, o) > NEAR_DUP_MAX for o in kept_sh):
                counts["near_duplicate"] += 1
                continue
            kept.append(s)
            kept_sh.append(sh)
    return kept, counts


def verdict(real_loss: float, mixed_loss: float) -> tuple[str, float]:
    rel = (mixed_loss - real_loss) / real_loss
    return ("gain" if rel < -VERDICT_MARGIN else "collapse" if rel > VERDICT_MARGIN else "neutral"), rel


def stream(tok, texts) -> torch.Tensor:
    ids = []
    for row in tok.encode(list(texts), prepend=tok.get_bos_token_id()):
        ids.extend(row)
    return torch.tensor(ids, dtype=torch.long)


def windows(data: torch.Tensor, T: int, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.stack([data[i:i + T + 1] for i in idx.tolist()])
    return rows[:, :-1], rows[:, 1:]


def train_arm(train_mod, cfg, real, synth, ratio, steps, seed) -> torch.nn.Module:
    """build_model(cfg) seeded, trained on rows from `real`, each one from `synth` with prob ratio."""
    torch.manual_seed(seed)
    model = train_mod.build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    T = cfg["sequence_len"]
    g = torch.Generator().manual_seed(seed + 1)  # the same draws in both arms
    for _ in range(steps):
        ri = torch.randint(0, len(real) - T - 1, (BATCH,), generator=g)
        si = torch.randint(0, max(1, len(synth) - T - 1), (BATCH,), generator=g)
        use = torch.rand(BATCH, generator=g) < ratio
        x, y = windows(real, T, ri)
        if use.any() and len(synth) > T + 1:
            sx, sy = windows(synth, T, si)
            x, y = torch.where(use[:, None], sx, x), torch.where(use[:, None], sy, y)
        loss = F.cross_entropy(model(x).reshape(-1, cfg["vocab_size"]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def val_loss(model, val: torch.Tensor, T: int) -> float:
    n = min(EVAL_WINDOWS, (len(val) - 1) // T)
    starts = torch.arange(n) * T
    x, y = windows(val, T, starts)
    return float(F.cross_entropy(model(x).reshape(-1, model.cfg["vocab_size"]), y.reshape(-1)))


def train_generator(out: Path, steps: int) -> Path:
    """train.py for `steps` steps, its model saved where the harness's runner would have it."""
    art = out / "generator" / "model.pt"
    env = dict(os.environ, AUTORESEARCH_STEPS=str(steps), AUTORESEARCH_ARTIFACT=str(art))
    log = out / "generator" / "train.log"
    art.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        subprocess.run([sys.executable, "train.py"], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, check=True)
    return art


def load_generator(a, out: Path, quick: bool):
    """(model, train module, description)."""
    from inference.runs import import_source, load_artifact_model, load_kept
    if a.run:
        model, kept, mod = load_kept(a.run, a.commit)
        return model, mod, f"kept {kept.short} of {a.run}"
    steps = GEN_STEPS[quick]
    art = train_generator(out, steps)
    mod = import_source((REPO / "train.py").read_text(), "train_flywheel")
    model, _ = load_artifact_model(art, mod)
    return model, mod, f"train.py, {steps} steps"


def generate_samples(model, mod, tok, docs, n_seeds, gen) -> list[dict]:
    from inference.generate import generate
    T = model.cos.size(1)
    plen = max(2, int(T * SEED_FRAC))
    prefixes = []
    for d in docs:
        ids = tok.encode(d, prepend=tok.get_bos_token_id())
        if len(ids) >= plen:
            prefixes.append(ids[:plen])
        if len(prefixes) == n_seeds:
            break
    out = generate(model, mod, torch.tensor(prefixes), T - plen, temperature=0.9, top_k=50, generator=gen)
    return [{"seed": tok.decode(p[1:]), "tokens": o, "text": tok.decode(o)} for p, o in zip(prefixes, out.tolist())]


def run(a) -> dict:
    import prepare
    from inference.generate import pick_device
    pick_device("cpu")
    quick = int(bool(a.quick))
    out = Path(a.out or (Path(a.run) if a.run else REPO / "out" / "flywheel"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tok = prepare.Tokenizer.from_directory()
    docs = [t for p in prepare.list_shards("train") for t in prepare._texts(p)][:MAX_DOCS]
    val = stream(tok, prepare._texts(prepare.list_shards("val")[0]))
    model, mod, gen_desc = load_generator(a, out, bool(quick))
    print(f"generator: {gen_desc}", flush=True)
    half = len(docs) // 2  # seeds from one half, the compared models' real data from the other
    samples = generate_samples(model, mod, tok, docs[:half], SEEDS[quick], torch.Generator().manual_seed(a.seed))
    survivors, rejected = gate(samples)
    claude = None
    if os.environ.get("ANTHROPIC_API_KEY") and survivors:  # the ensemble of Claude judges, last
        from lab.claude_gate import ClaudeGate
        cg = ClaudeGate()
        survivors, rejected["claude"] = cg.filter(survivors)
        claude = {"model": cg.model, "calls": cg.calls, "errors": cg.errors, "cost_usd": cg.cost_usd}
    print(f"generated {len(samples)}, survivors {len(survivors)}, rejected {rejected}", flush=True)
    real = stream(tok, docs[half:])
    synth = stream(tok, [s["seed"] + s["text"] for s in survivors])
    from search.knobs import load_train
    train_mod = load_train(prepare.PROFILE)  # train.py with the profile's knob values (runtime.PROFILE_KNOBS)
    cfg = train_mod.model_config(tok.get_vocab_size(), prepare.MAX_SEQ_LEN)
    steps = TRAIN_STEPS[quick]
    base = val_loss(train_arm(train_mod, cfg, real, synth, 0.0, steps, a.seed), val, cfg["sequence_len"])
    ratios = [float(r) for r in a.ratios.split(",")] if a.ratios else list(RATIOS[quick])
    results = []
    for r in ratios:
        if len(synth) <= cfg["sequence_len"] + 1:
            results.append({"ratio": r, "verdict": "no_data", "reason": "too few survivors"})
            continue
        mixed = val_loss(train_arm(train_mod, cfg, real, synth, r, steps, a.seed), val, cfg["sequence_len"])
        v, rel = verdict(base, mixed)
        results.append({"ratio": r, "real_val_loss": base, "mixed_val_loss": mixed, "relative": rel, "verdict": v})
        print(f"ratio {r:.2f} | real-only {base:.4f} | mixed {mixed:.4f} | {100 * rel:+.2f}% | {v}", flush=True)
    report = {"generator": gen_desc, "profile": prepare.PROFILE, "steps": steps, "seeds": len(samples),
              "survivors": len(survivors), "rejected": rejected, "synthetic_tokens": len(synth),
              "real_tokens": len(real), "margin": VERDICT_MARGIN, "ratios": results, "claude_gate": claude,
              "examples": [s["text"][:200] for s in survivors[:3]], "seconds": time.time() - t0}
    (out / "flywheel_report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {out / 'flywheel_report.json'} ({report['seconds']:.0f}s)")
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", allow_abbrev=False)
    r.add_argument("--quick", action="store_true")
    r.add_argument("--run", type=Path, help="take the generator from this loop run (best kept, or --commit)")
    r.add_argument("--commit")
    r.add_argument("--out", type=Path, help="folder of flywheel_report.json (default the run, else out/flywheel)")
    r.add_argument("--ratios", help="comma-separated synthetic fractions")
    r.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    run(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
