"""A realistic run folder to look at without a GPU: `uv run dashboard/demo.py DIR [--n 24]`.

Builds a git repo with a train.py, branch autoresearch/<tag> in a worktree at
.autoresearch/<tag>/, kept commits on the branch, discarded ones under
refs/autoresearch/<tag>/discarded/<n>, and every file the loop writes (docs/contracts.md):
results.tsv, journal.jsonl, traces.jsonl, state.json, run.json, logs/, queue.sqlite. The
dashboard's tests and benchmark use it; the figures are synthetic (seeded), the git is real.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import time
from pathlib import Path

from harness.queue_store import QueueStore

# The synthetic baseline val_bpb, run-to-run spread, and the Judge's multiple k.
BASELINE_BPB, SPREAD, K = 1.1020, 0.0015, 2.0
# Seconds of wall time per synthetic experiment (proposal + training + eval + overhead).
EXP_SECONDS = 420.0
TRAIN_PY = """\
# train.py (demo): the one file the loop edits.
DEPTH = 8  # transformer layers
MATRIX_LR = 0.04  # Muon learning rate
WARMDOWN_RATIO = 0.5  # share of steps in the LR cool-down
WINDOW_PATTERN = "SSSL"  # sliding/long attention layers

def main():
    print("training")
"""
# (constant, new value, description) edits the demo cycles through.
EDITS = [("MATRIX_LR", "0.05", "raise MATRIX_LR to 0.05"), ("DEPTH", "10", "deeper: DEPTH 8 -> 10"),
         ("WARMDOWN_RATIO", "0.6", "longer cool-down (WARMDOWN_RATIO 0.6)"),
         ("WINDOW_PATTERN", '"SSLL"', "more long-window layers (SSLL)"), ("MATRIX_LR", "0.03", "lower MATRIX_LR to 0.03"),
         ("DEPTH", "6", "shallower but wider: DEPTH 6"), ("WARMDOWN_RATIO", "0.4", "shorter cool-down (0.4)")]


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _summary(bpb: float, n: int) -> str:
    keys = [("val_bpb", f"{bpb:.6f}"), ("training_seconds", "300.1"), ("total_seconds", "331.4"),
            ("peak_vram_mb", f"{44000 + 50 * n:.1f}"), ("mfu_percent", "39.80"), ("total_tokens_M", "499.6"),
            ("num_steps", "953"), ("num_params_M", "50.3"), ("depth", "8"), ("eval_seconds", "12.3"),
            ("attn_backend", "sdpa"), ("device", "cpu"), ("profile", "cpu"), ("data", "a1b2c3d4e5f6")]
    return "---\n" + "".join(f"{k + ':':<18}{v}\n" for k, v in keys)


def build(root: Path, tag: str = "demo", n: int = 24, seed: int = 0, git_upto: int | None = None,
          queue: bool = True, phase: str = "training") -> Path:
    """Build the demo under root; returns the run folder. Experiments past git_upto get
    synthetic hashes instead of real commits (fast fixtures with thousands of rows)."""
    rng = random.Random(seed)
    repo = Path(root) / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "demo@example.invalid")
    _git(repo, "config", "user.name", "demo")
    (repo / ".gitignore").write_text(".autoresearch/\nresults.tsv\njournal.jsonl\ntraces.jsonl\n"
                                     "state.json\nrun.json\nqueue.sqlite*\nlogs/\n")
    (repo / "train.py").write_text(TRAIN_PY)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "baseline")
    run = repo / ".autoresearch" / tag
    _git(repo, "worktree", "add", "-q", "-b", f"autoresearch/{tag}", str(run))
    (run / "logs").mkdir()
    git_upto = n if git_upto is None else git_upto
    t0 = time.time() - n * EXP_SECONDS - 200
    best = None
    rows, records, spans = [], [], []
    parent = _git(run, "rev-parse", "HEAD")
    for i in range(1, n + 1):
        started = t0 + (i - 1) * EXP_SECONDS
        if i == 1:
            desc, hyp, bpb, status = "baseline", "the unmodified train.py", BASELINE_BPB, "keep"
        else:
            name, value, desc = EDITS[(i - 2) % len(EDITS)]
            hyp = f"{desc} should lower val_bpb within the fixed budget"
            crash = rng.random() < 0.12
            bpb = 0.0 if crash else round(best + rng.gauss(0.0015, 0.006), 6)
            status = "crash" if crash else ("keep" if bpb < best - K * SPREAD else "discard")
        if i == 1 or i > git_upto:
            commit = parent if i == 1 else "%040x" % rng.getrandbits(160)
        else:
            src = (run / "train.py").read_text()
            src = "\n".join(ln if not ln.startswith(name + " =") else f"{name} = {value}  # exp {i}: {desc}"
                            for ln in src.split("\n"))
            (run / "train.py").write_text(src)
            _git(run, "commit", "-q", "-am", f"{desc}\n\nHypothesis: {hyp}")
            commit = _git(run, "rev-parse", "HEAD")
            if status != "keep":
                _git(run, "update-ref", f"refs/autoresearch/{tag}/discarded/{i}", commit)
                _git(run, "reset", "-q", "--hard", parent)
        prev_parent, prev_best = parent, best
        if status == "keep":
            best, parent = bpb, commit
        log = f"logs/exp-{i:04d}.log"
        tail = ("Traceback (most recent call last):\n  File \"train.py\", line 1\nRuntimeError: CUDA out of memory\n"
                if status == "crash" else f"step 953/953 loss 3.21\n{_summary(bpb, i)}")
        (run / log).write_text("".join(f"step {s:05d} loss {4 - s / 400:.4f}\n" for s in range(0, 950, 50)) + tail)
        rows.append(f"{commit[:7]}\t{bpb:.6f}\t{0 if status == 'crash' else 44.0 + i / 20:.1f}\t{status}\t{desc}")
        judge = {"decision": status, "confidence": round(rng.uniform(0.5, 0.95), 2), "spread": SPREAD, "k": K,
                 "reason": f"delta {bpb - (prev_best or bpb):+.4f} vs noise band ±{K * SPREAD:.4f}",
                 "rule": {"decision": status}, "llm": None}
        meta = {"ok": True, "contested": status == "discard" and i % 5 == 0,
                "reason": "keep rate within expected range"}
        records.append({"n": i, "tag": tag, "parent": prev_parent, "commit": commit, "short": commit[:7],
                        "status": status, "description": desc, "hypothesis": hyp, "proposer": "offline",
                        "model": None, "diff": f"--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-old\n+{desc}\n",
                        "summary": {"val_bpb": bpb, "training_seconds": 300.1, "peak_vram_mb": 44000.0 + i},
                        "trusted_bpb": bpb if status != "crash" else None,
                        "crash_class": "oom" if status == "crash" else None, "decision_reason": judge["reason"],
                        "verdicts": {"guard": {"ok": True, "reason": "only train.py changed"},
                                     "judge": judge, "metajudge": meta},
                        "timings": {"proposal": 20.0, "run": 330.0, "eval": 15.0, "git": 0.4, "overhead": 5.0},
                        "tokens": {"input": 0, "output": 0}, "cost_usd": 0.0, "log": log,
                        "discarded_ref": f"refs/autoresearch/{tag}/discarded/{i}" if status != "keep" else None,
                        "started_at": started, "ended_at": started + 371})
        trace = f"t{i:04d}"
        for j, (name, a, b) in enumerate([("experiment", 0, 371), ("propose", 0, 20), ("guard", 20, 21),
                                           ("run", 21, 351), ("evaluate", 351, 366), ("judge", 366, 371)]):
            spans.append({"id": f"{trace}-{j}", "parent": None if j == 0 else f"{trace}-0", "trace": trace,
                          "name": name, "start": started + a, "end": started + b,
                          "input": {"n": i} if j == 0 else {}, "output": {}, "tokens": None, "cost": 0.0,
                          "error": "CUDA out of memory" if name == "run" and status == "crash" else None})
    (run / "results.tsv").write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
                                     + "".join(r + "\n" for r in rows))
    (run / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "traces.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    now = time.time()
    (run / "run.json").write_text(json.dumps({"tag": tag, "budget": 300, "fingerprint": "a1b2c3d4e5f6",
                                              "profile": "cpu", "base_commit": records[0]["commit"],
                                              "created_at": t0}))
    (run / "state.json").write_text(json.dumps({
        "tag": tag, "phase": phase, "experiment": n + 1, "started_at": t0, "run_started_at": now - 95,
        "budget": 300, "best": {"commit": parent, "val_bpb": best}, "last_decision": rows[-1].split("\t")[3],
        "keep_rate": sum(r["status"] == "keep" for r in records) / len(records),
        "tokens": {"input": 182_340, "output": 20_115}, "cost_usd": 0.87, "updated_at": now, "pid": None}))
    if queue:
        store = QueueStore(run / "queue.sqlite")
        for rec in [r for r in records if r["status"] == "discard"][:2]:
            store.escalate(tag=tag, experiment=rec["n"], commit=rec["commit"], kind="contested",
                           reason=f"improvement inside the noise band ({rec['description']})",
                           payload={"val_bpb": rec["summary"]["val_bpb"], "judge": rec["verdicts"]["judge"]})
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="empty folder to build the demo in")
    ap.add_argument("--n", type=int, default=24, help="experiments")
    ap.add_argument("--tag", default="demo")
    args = ap.parse_args()
    run = build(Path(args.dir), args.tag, args.n)
    print(f"demo run: {run}\nview it: uv run dashboard/app.py --repo {run.parent.parent}")


if __name__ == "__main__":
    main()
