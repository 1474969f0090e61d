"""
Build `.device-carry/` (git-ignored), the folder that travels with the working tree to a lent GPU
machine, which has python3 + torch but no uv and no network:

    uv run scripts/build_device_carry.py          # then, on the device:
    python3 scripts/gpu_check.py --out $OUT       # with carry [".device-carry"]

It holds `cache/`: the gpu profile's data and tokenizer, prepared offline here (Python's standard
library as text, ~5 MiB), because the device cannot download ClimbMix. No wheels: the device
already has everything gpu_check.py and train.py import; `kernels` (FA3 from the hub) is useless
without network and is left out, so FA3 is reported as unavailable there (docs/gpu.md).
An optional `site/` folder, if you put pure-Python packages there, goes on the device's PYTHONPATH.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CARRY = REPO / ".device-carry"
CARRY_LIMIT_MIB = 48  # the device call carries at most 64 MiB with the working tree; keep room


def folder_mib(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**20


def build(carry=CARRY, fresh=False):
    carry = Path(carry)
    if fresh and (carry / "cache").exists():
        shutil.rmtree(carry / "cache")
    carry.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, AUTORESEARCH_CACHE=str(carry / "cache"), AUTORESEARCH_PROFILE="gpu")
    t0 = time.time()
    subprocess.run([sys.executable, str(REPO / "prepare.py"), "--offline"], cwd=REPO, env=env, check=True)
    describe = subprocess.run([sys.executable, "-c", "import json, prepare; print(json.dumps(prepare.describe()))"],
                              cwd=REPO, env=env, capture_output=True, text=True, check=True)
    git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True)
    size = folder_mib(carry)
    manifest = {"built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(time.time() - t0, 1),
                "python": sys.version.split()[0], "size_mib": round(size, 2),
                "commit": git.stdout.strip() or "unknown",
                "data": json.loads(describe.stdout.strip().splitlines()[-1])}
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if size > CARRY_LIMIT_MIB:
        raise SystemExit(f"{carry} is {size:.1f} MiB, over {CARRY_LIMIT_MIB} MiB: the device call would refuse it")
    print(f"{carry}: {size:.1f} MiB (limit {CARRY_LIMIT_MIB}); data fingerprint {manifest['data'].get('fingerprint')}")
    return manifest


if __name__ == "__main__":
    build(fresh="--fresh" in sys.argv[1:])
