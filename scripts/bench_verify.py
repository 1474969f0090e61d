"""Cost of the trusted re-evaluation per experiment, and a check that an honest run verifies.

    uv run scripts/bench_verify.py [--steps 20] [--repeats 2]

Trains the repository's train.py for a few steps in the current profile (AUTORESEARCH_PROFILE /
AUTORESEARCH_CACHE as for any run; data must be prepared), saving the model artifact, then runs
harness/verify.py on it `--repeats` times. Prints the run's own eval time next to verify's total
and per-stage seconds, the printed-vs-trusted gap against the tolerance, and the causality probe's
largest leak against its limit. Exit status 1 if the honest run does not verify (on a GPU this is
the check that bf16 / FA3 / torch.compile in the run stay within verify's tolerance of the SDPA,
uncompiled re-evaluation).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.job import FIXED_SOURCES  # noqa: E402
from harness.runner import RunSpec, run_train  # noqa: E402
from harness.verify import Evaluation, eval_rows, tolerance, verify  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--steps", type=int, default=20, help="training steps of the run (AUTORESEARCH_STEPS)")
    ap.add_argument("--repeats", type=int, default=2, help="verify runs to time")
    args = ap.parse_args(argv)
    from search import knobs
    profile = os.environ.get("AUTORESEARCH_PROFILE")
    import prepare
    profile = profile or prepare.PROFILE
    # the train.py a tag on this profile commits: the profile's knob values written in
    train_src = knobs.for_profile((REPO / "train.py").read_text(), profile)[0]
    prepare_src = (REPO / "prepare.py").read_text()
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as d:
        run_dir = Path(d)
        t0 = time.time()
        src = run_dir / "src"
        src.mkdir()
        for name in FIXED_SOURCES:
            (src / name).write_text((REPO / name).read_text())
        (src / "train.py").write_text(train_src)
        run = run_train(RunSpec(src, run_dir, 1, float(os.environ.get("AUTORESEARCH_TIME_BUDGET", 300)),
                                env={"AUTORESEARCH_STEPS": str(args.steps)}, eval_rows=eval_rows(profile)))
        if run.crash_class is not None:
            print(f"the run crashed ({run.crash_class}):\n{run.log_tail}")
            return 2
        s = run.summary
        print(f"run: {time.time() - t0:.1f}s wall, profile {s.get('profile')}, device {s.get('device')}, "
              f"attention {s.get('attn_backend')}, val_bpb {s['val_bpb']:.6f}, eval_seconds {s.get('eval_seconds')}")
        rows = eval_rows(s.get("profile") or profile)
        results = [verify(run.artifact, Evaluation(train_src, prepare_src, rows, printed_bpb=s["val_bpb"]))
                   for _ in range(args.repeats)]
    ok = True
    for i, r in enumerate(results, 1):
        t = r.details.get("timings") or {}
        stages, prev = [], 0.0
        for name in ("start", "load_artifact", "import_prepare", "load_graph", "evaluate", "serving"):
            if name in t:
                stages.append(f"{name} {t[name] - prev:.1f}s")
                prev = t[name]
        print(f"verify {i}: {'OK' if r.ok else 'FAILED'} in {r.seconds:.1f}s ({', '.join(stages)})")
        if r.trusted_bpb is not None:
            gap = abs(r.trusted_bpb - s["val_bpb"])
            print(f"  trusted {r.trusted_bpb:.6f} vs printed {s['val_bpb']:.6f}: gap {gap:.6f} "
                  f"(tolerance {tolerance(r.trusted_bpb):.6f})")
        p = r.details.get("causality") or {}
        if p:
            print(f"  causality: {p['checked_rows']} spliced rows in {p['checked_batches']} batches, largest "
                  f"change before a cut {p['max_leak']:.3g} (limit {p['limit']:.3g})")
        if not r.ok:
            print(f"  reason: {r.reason}")
            ok = False
    cost = statistics.fmean(r.seconds for r in results)
    print(f"extra cost per experiment: {cost:.1f}s (mean of {len(results)}), "
          f"vs the run's own eval {s.get('eval_seconds')}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
