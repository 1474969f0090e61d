"""A draft model for speculative decoding from a Hyperband sweep: its smallest survivor.

    uv run inference/sweep_draft.py --sweep out/pipeline/sweep --out out/pipeline/draft [--steps N]

Survivors are the candidates evaluated at the sweep's top rung without a crash (sweep.jsonl);
the smallest is the one with the fewest parameters (built on the meta device at the prepared
profile). Its train.py (candidates/cand_<id>.py) is trained for the top rung's steps (or --steps)
with AUTORESEARCH_ARTIFACT, as the harness runs it; <out>/model.pt and <out>/train.py are then a
draft for `inference/speculative.py --draft-artifact <out>/model.pt --draft-train <out>/train.py`.
Sweep candidates share the prepared tokenizer, so any of them can draft for the winner.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from inference.runs import REPO, import_source


def survivors(sweep: Path) -> list[dict]:
    """Records of candidates that finished the top rung (the most steps any task ran)."""
    recs = []
    for line in (sweep / "sweep.jsonl").read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("kind") == "sweep_task":
            recs.append(rec)
    top = max((r["steps"] for r in recs), default=0)
    by_cand = {r["cand"]: r for r in recs if r["steps"] == top and r.get("val_bpb") is not None}
    return list(by_cand.values())


def candidate_file(sweep: Path, config: dict) -> Path:
    from search.space import config_id
    return sweep / "candidates" / f"cand_{config_id(config)}.py"


def params_of(path: Path) -> int:
    """Parameters of a candidate's model at the prepared profile (meta device: nothing allocated)."""
    import prepare
    mod = import_source(path.read_text(), f"cand_{path.stem}")
    cfg = mod.model_config(prepare.Tokenizer.from_directory().get_vocab_size(), prepare.MAX_SEQ_LEN)
    with torch.device("meta"):
        return sum(p.numel() for p in mod.build_model(cfg).parameters())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--sweep", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, help="training steps (default the top rung's)")
    a = p.parse_args(argv)
    found = [(params_of(candidate_file(a.sweep, r["config"])), r) for r in survivors(a.sweep)
             if candidate_file(a.sweep, r["config"]).exists()]
    if not found:
        print(f"no survivor with a candidate file in {a.sweep}", file=sys.stderr)
        return 1
    params, rec = min(found, key=lambda x: x[0])
    a.out.mkdir(parents=True, exist_ok=True)
    shutil.copy(candidate_file(a.sweep, rec["config"]), a.out / "train.py")
    steps = a.steps or rec["steps"]
    print(f"draft: {rec['cand']} ({params:,} params, val_bpb {rec['val_bpb']:.4f} at {rec['steps']} steps), "
          f"training {steps} steps", flush=True)
    env = dict(os.environ, AUTORESEARCH_STEPS=str(steps), AUTORESEARCH_ARTIFACT=str(a.out / "model.pt"),
               PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with open(a.out / "train.log", "w") as log:
        rc = subprocess.run([sys.executable, str(a.out / "train.py")], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT).returncode
    (a.out / "draft.json").write_text(json.dumps({"cand": rec["cand"], "config": rec["config"], "params": params,
                                                  "steps": steps, "returncode": rc}, indent=1) + "\n")
    if rc != 0 or not (a.out / "model.pt").exists():
        print(f"draft training failed: see {a.out / 'train.log'}", file=sys.stderr)
        return 1
    print(f"draft model: {a.out / 'model.pt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
