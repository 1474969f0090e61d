"""A realistic run folder to look at without a GPU: `uv run dashboard/demo.py DIR [--n 24]`.

Builds a git repo with a train.py, branch autoresearch/<tag> in a worktree at
.autoresearch/<tag>/, kept commits on the branch, discarded ones under
refs/autoresearch/<tag>/discarded/<n>, and every file the loop writes (docs/contracts.md):
results.tsv, journal.jsonl, traces.jsonl, state.json, run.json, logs/, queue.sqlite. Records go
through the loop's own writers and types (harness/results.py, harness/experiment_record.py ExperimentRecord,
harness/decision.py Decision, runfiles/state.py RunState), shaped as agent/experiment.py record() and the judge hierarchy shape them, so
a demo folder and a real run folder have one schema. The dashboard's tests and benchmark use it;
the figures are synthetic (seeded), the git is real.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import time
from pathlib import Path

from search import knobs
from runfiles.queue_store import QueueStore
from harness.decision import Basis, Decision
from harness.experiment_record import ExperimentRecord
from runfiles.state import RunningExperiment, RunState, SessionTally, WorkerState
from harness.results import append_journal, append_result, init_results
from runfiles.state import write_state

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


def _guard(n: int) -> dict:
    """The guard verdict as record() stores it (GuardVerdict's ok, reason, details)."""
    return {"ok": True, "reason": "baseline: unmodified train.py" if n == 1 else "ok", "details": {}}


def _decision(n: int, status: str, bpb: float, best: float | None, rng: random.Random) -> Decision:
    """The Decision the judge hierarchy (agent/judges/hierarchy.py) returns, with demo figures."""
    if status == "crash":
        rule = {"judge": "rule", "status": "crash", "reason": "run crashed: oom", "confidence": 1.0}
        return Decision("crash", rule["reason"], None,
                        {"judge": {"status": "crash", "basis": Basis.CRASH.value, "rule": rule}}, basis=Basis.CRASH)
    printed = round(bpb, 6)
    seconds = round(rng.uniform(11.0, 14.0), 3)
    verify = {"ok": True, "reason": f"verified: trusted val_bpb {bpb:.6f} (printed {printed:.6f}), causal, "
                                    f"{seconds:.1f}s",
              "trusted_bpb": bpb, "printed_bpb": printed, "causal": True, "seconds": seconds,
              "details": {"sha_match": True, "stage": "done", "error": None}}
    threshold = K * SPREAD
    if n == 1:
        values = [BASELINE_BPB - SPREAD / math.sqrt(2), BASELINE_BPB + SPREAD / math.sqrt(2)]
        band = {"values": values, "spread": statistics.stdev(values), "k": K, "threshold": threshold,
                "measured": True}
        reason = (f"baseline: trusted val_bpb {bpb:.6f} over 2 run(s); noise band {threshold:.6f} "
                  f"({K:g}x spread {band['spread']:.6f})")
        judge = {"status": "keep", "basis": Basis.BASELINE.value, "runs": values, "baseline_values": values,
                 "band": band, "threshold": threshold, "spread": band["spread"], "reason": reason}
        return Decision("keep", reason, bpb, {"verify": verify, "judge": judge}, basis=Basis.BASELINE)
    gain = best - bpb
    if status == "keep":
        reason = f"trusted val_bpb {bpb:.6f} beats best {best:.6f} by {gain:.6f} (band {threshold:.6f})"
    elif gain > 0:
        reason = f"contested: gain {gain:.6f} inside the noise band ({bpb:.6f} vs best {best:.6f}, within the band {threshold:.6f})"
    else:
        reason = f"no gain: {bpb:.6f} vs best {best:.6f} (band {threshold:.6f})"
    rule = {"judge": "rule", "status": status, "reason": reason, "confidence": 0.9 if status == "keep" else 0.7,
            "trusted_bpb": bpb, "best_bpb": best, "threshold": threshold, "spread": SPREAD, "net_lines": 0,
            "similar_to": [], "improvement": gain}
    judge = {"best_before": best, "threshold": threshold, "spread": SPREAD, "runs": [bpb], "improvement": gain,
             "net_lines": 0, "rule": rule, "llm": None, "cost_usd": 0.0, "status": status,
             "basis": Basis.METRIC.value, "reason": reason, "escalations": []}
    meta = {"n": n, "metrics": {"keep_rate": None}, "flags": [], "contradiction": None, "escalated": []}
    runs = [bpb - SPREAD / 4, bpb + SPREAD / 4] if status == "keep" else [bpb]
    seeds = [1000 + 16 * (n - 1) + r - 1 for r in range(len(runs))]
    se = SPREAD * math.sqrt(1 / len(runs) + 1 / 5)
    evidence = {"call": status if status == "keep" else "discard", "p_keep": 0.99,
                "candidate": {"commit": None, "runs": [{"bpb": v, "seed": sd, "used": True, "why": None,
                                                        "log": f"logs/exp-{n:04d}{'.rerun1' if k else ''}.log"}
                                                       for k, (v, sd) in enumerate(zip(runs, seeds))]},
                "incumbent": {"commit": None, "runs": [{"bpb": best, "seed": None, "used": True}], "remembered": False},
                "comparison": {"incumbent_mean": best, "gain": gain, "sigma": SPREAD, "df": 4, "se": se,
                               "p_better": 0.995 if status == "keep" else 0.3, "margin": 3.75 * se},
                "noise": {"sigma": SPREAD, "df": 4}}
    return Decision(status, reason, bpb, {"verify": verify, "judge": judge, "metajudge": meta, "evidence": evidence},
                    basis=Basis.METRIC)


def _record(tag: str, i: int, parent: str | None, commit: str, status: str, desc: str, hyp: str,
            source: str, decision: Decision, started: float, log: str) -> ExperimentRecord:
    """The journal record agent/experiment.py record() writes for this experiment."""
    crash = status == "crash"
    summary = None if crash else {"val_bpb": decision.trusted_bpb, "training_seconds": 300.1,
                                  "peak_vram_mb": 44000.0 + 50 * i, "num_steps": 953, "eval_seconds": 12.3}
    return ExperimentRecord.of(
        n=i, tag=tag, parent=parent, commit=commit, short=commit[:7], status=status, description=desc,
        hypothesis=hyp, proposer="baseline" if i == 1 else "offline", model=None,
        diff="" if i == 1 else f"--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-old\n+{desc}\n",
        summary=summary, trusted_bpb=decision.trusted_bpb,
        clock=None if crash else {"startup_s": 17.6, "train_s": 300.1, "post_s": 12.3, "charged_s": 300.1},
        sealed=not crash, verify_seconds=decision.verify_figure("seconds"),
        crash_class="oom" if crash else None, decision_reason=decision.reason,
        verdicts={"guard": _guard(i), **{k: v for k, v in decision.verdicts.items() if k != "evidence"}},
        evidence=decision.verdict("evidence") or None,
        timings={"proposal": 20.0, "proposal_wait": 0.0, "run": 330.0, "training": 300.1, "eval": 12.3,
                 "startup": 17.6, "git": 0.4, "total": 371.0, "overhead": 70.9},
        tokens={"input": 0, "output": 0}, cost_usd=0.0, log=log,
        discarded_ref=f"refs/autoresearch/{tag}/discarded/{i}" if status != "keep" and i > 1 else None,
        started_at=started, memory_gb=0.0 if crash else (44000.0 + 50 * i) / 1024,
        config=knobs.values(source), code=knobs.code_fingerprint(source), attempts=[], notes="",
        ended_at=started + 371)


def build(root: Path, tag: str = "demo", n: int = 24, seed: int = 0, git_upto: int | None = None,
          queue: bool = True, phase: str = "training", workers: int = 0) -> Path:
    """Build the demo under root; returns the run folder. Experiments past git_upto get
    synthetic hashes instead of real commits (fast fixtures with thousands of rows). With
    `workers`, state.json lists that many experiments in flight (--workers N)."""
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
    init_results(run / "results.tsv")
    git_upto = n if git_upto is None else git_upto
    t0 = time.time() - n * EXP_SECONDS - 200
    best = None
    records, spans = [], []
    parent = _git(run, "rev-parse", "HEAD")
    for i in range(1, n + 1):
        started = t0 + (i - 1) * EXP_SECONDS
        if i == 1:
            desc, hyp, bpb, status = "baseline (unmodified train.py)", "the unmodified train.py", BASELINE_BPB, "keep"
        else:
            name, value, desc = EDITS[(i - 2) % len(EDITS)]
            hyp = f"{desc} should lower val_bpb within the fixed budget"
            crash = rng.random() < 0.12
            bpb = 0.0 if crash else best + rng.gauss(0.0015, 0.006) + rng.uniform(-4e-7, 4e-7)
            status = "crash" if crash else ("keep" if bpb < best - K * SPREAD else "discard")
        source = (run / "train.py").read_text()   # what the experiment ran (its commit's train.py)
        if i == 1 or i > git_upto:
            commit = parent if i == 1 else "%040x" % rng.getrandbits(160)
        else:
            src = (run / "train.py").read_text()
            src = "\n".join(ln if not ln.startswith(name + " =") else f"{name} = {value}  # exp {i}: {desc}"
                            for ln in src.split("\n"))
            (run / "train.py").write_text(src)
            source = src
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
        decision = _decision(i, status, bpb, prev_best, rng)
        rec = _record(tag, i, None if i == 1 else prev_parent, commit, status, desc, hyp, source, decision,
                      started, log)
        # The loop's order: the journal record, then the results.tsv row with the decision's figure.
        append_journal(run / "journal.jsonl", rec.to_dict())
        append_result(run / "results.tsv", commit, decision.trusted_bpb, rec.memory_gb, status, desc)
        records.append(rec)
        trace = f"t{i:04d}"
        for j, (name, a, b) in enumerate([("experiment", 0, 371), ("propose", 0, 20), ("guard", 20, 21),
                                           ("run", 21, 351), ("evaluate", 351, 366), ("judge", 366, 371)]):
            spans.append({"id": f"{trace}-{j}", "parent": None if j == 0 else f"{trace}-0", "trace": trace,
                          "name": name, "start": started + a, "end": started + b,
                          "input": {"n": i} if j == 0 else {}, "output": {}, "tokens": None, "cost": 0.0,
                          "error": "CUDA out of memory" if name == "run" and status == "crash" else None})
    (run / "traces.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    now = time.time()
    (run / "run.json").write_text(json.dumps({"tag": tag, "budget": 300, "fingerprint": "a1b2c3d4e5f6",
                                              "profile": "cpu", "base_commit": records[0].commit,
                                              "created_at": t0}))
    in_flight = [WorkerState(worker=w, n=n + 1 + w, phase="training", phase_started_at=now - 95 - 30 * w,
                             run_started_at=now - 95 - 30 * w, commit="%040x" % rng.getrandbits(160),
                             parent=parent, description=EDITS[(n + w) % len(EDITS)][2]) for w in range(workers)]
    running = RunningExperiment(
        experiment=n + 1, run_started_at=now - 95,
        idea={"description": EDITS[n % len(EDITS)][2], "proposer": "offline",
              "hypothesis": f"{EDITS[n % len(EDITS)][0]} at {EDITS[n % len(EDITS)][1]} should lower val_bpb"},
        run={"k": 2, "of": 3, "why": "confirming: one run is no evidence"})
    tally = SessionTally(best={"commit": parent, "val_bpb": best},
                         last_decision=f"exp {n} {records[-1].status}: {records[-1].decision_reason}",
                         keep_rate=sum(r.status == "keep" for r in records) / len(records),
                         tokens={"input": 182_340, "output": 20_115}, cost_usd=0.87)
    state = RunState(tag=tag, phase=phase, phase_started_at=now - 95, started_at=t0, budget=300, pid=None,
                     running=running, tally=tally, workers=in_flight)
    write_state(run / "state.json", **state.to_dict())
    if queue:
        store = QueueStore(run / "queue.sqlite")
        for rec in [r for r in records if r.status == "discard"][:2]:
            store.escalate(tag=tag, experiment=rec.n, commit=rec.commit, kind="contested",
                           reason=f"improvement inside the noise band ({rec.description})",
                           payload={"status": rec.status, "description": rec.description,
                                    "figures": {k: rec.judge.get(k) for k in
                                                ("best_before", "threshold", "spread", "runs", "improvement")},
                                    "verify": rec.verify})
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("dir", help="empty folder to build the demo in")
    ap.add_argument("--n", type=int, default=24, help="experiments")
    ap.add_argument("--tag", default="demo")
    args = ap.parse_args()
    run = build(Path(args.dir), args.tag, args.n)
    print(f"demo run: {run}\nview it: uv run dashboard/app.py --repo {run.parent.parent}")


if __name__ == "__main__":
    main()
