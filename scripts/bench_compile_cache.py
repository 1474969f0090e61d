"""
Cold vs warm compile through the tag's trusted compile cache (harness/compiled.py), measured
the way the loop runs: train.py with the profile's knob values and COMPILE = True, sealed in
bubblewrap, steps mode. Three runs: the harness's warm-up (writes the cache, compiles cold), a run
with the cache off (cold), a run reading it (warm). Startup is the harness clock's (process start
to the first step line: imports, model, the attention probe, the compile trial); the first step's
dt holds the Muon step's compile.

    AUTORESEARCH_PROFILE=cpu uv run scripts/bench_compile_cache.py [--steps 3]
"""

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent import compile_warm  # noqa: E402
from search import knobs  # noqa: E402
from harness.job import FIXED_SOURCES  # noqa: E402
from harness.job import materialise  # noqa: E402
from harness.runner import RunSpec, RunView, run_train  # noqa: E402
from harness.sandbox import DataView, detect  # noqa: E402
from harness.verify import eval_rows  # noqa: E402


def figures(run, t0):
    text = Path(run.log_path).read_text(errors="replace")
    dts = [int(m) / 1000 for m in re.findall(r"^step \d+ .*?\| dt (\d+)ms", text, re.M)]
    clock = run.extra.get("clock") or {}
    return {"crash": run.crash_class, "wall_s": round(time.time() - t0, 1), "startup_s": clock.get("startup_s"),
            "first_step_s": dts[0] if dts else None, "later_step_s": dts[1:],
            "compile": (run.summary or {}).get("compile")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0], allow_abbrev=False)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    import prepare
    box = detect()
    if not box.sealed:
        raise SystemExit(f"needs bubblewrap: {box.reason}")
    source, _ = knobs.for_profile((REPO / "train.py").read_text(), prepare.PROFILE)
    source = knobs.set_knobs(source, {"COMPILE": True})
    files = {"train.py": source, **{name: (REPO / name).read_text() for name in FIXED_SOURCES}}
    view = DataView.from_describe({"paths": prepare.data_paths()})
    run_dir = Path(tempfile.mkdtemp(prefix="bench-compile-cache-"))
    env = {"AUTORESEARCH_STEPS": str(args.steps)}
    out = {"profile": prepare.PROFILE, "steps": args.steps, "run_dir": str(run_dir)}
    t0 = time.time()
    out["warm_up"] = compile_warm.warm(files, run_dir, 300, sandbox=box, data=view,
                                        eval_rows=eval_rows(prepare.PROFILE))
    for n, (label, mode) in enumerate((("cold", "off"), ("warm", "read")), start=1):
        src = materialise(files, run_dir / ".runs" / "src")
        t0 = time.time()
        run = run_train(RunSpec(src, run_dir, n, 300, env=env, sealed=True, eval_rows=eval_rows(prepare.PROFILE),
                                view=RunView(sandbox=box, data=view, compile_cache=mode)))
        out[label] = figures(run, t0)
        print(label, json.dumps(out[label]), flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
