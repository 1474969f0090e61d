"""The trusted compile cache (harness/compiled.py): written once by the harness's warm-up of
the base train.py, read by later runs through a private copy, never written by them. Real
bubblewrap, real torch.compile (inductor's C++ backend on CPU), a stand-in train.py that compiles
one small function so each run takes seconds."""

import json
import os
from pathlib import Path

import pytest

from agent import compile_warm
from harness import compiled as compile_cache
from harness.runner import RunSpec, RunView, run_train
from harness.sandbox import Sandbox, detect

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not detect().sealed and not os.environ.get("CI"),
                                reason="needs bubblewrap (apt-get install bubblewrap)")

# Compiles one function, reports inductor's cache hits and what its cache folder held at start,
# then (as a cheat would) tries to plant a file in the trusted cache and leaves one in its own.
STAND_IN = '''
COMPILE = True  # the stand-in compiles
import json, os, time, torch
t0 = time.time()
cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
had = sum(len(f) for _, _, f in os.walk(cache)) if cache and os.path.isdir(cache) else 0
fn = torch.compile(lambda x: (x * 2.5).sin().cumsum(0), dynamic=False)
fn(torch.randn(64))
from torch._dynamo.utils import counters
planted = {}
for target in ("/tmp/.trusted-compile-cache/planted.txt", os.path.join(cache, "planted.txt")):
    try:
        open(target, "w").write("from a run")
        planted[target] = "written"
    except OSError as e:
        planted[target] = type(e).__name__
print("REPORT " + json.dumps({"compile_s": time.time() - t0, "files_at_start": had, "planted": planted,
                              "hits": counters["inductor"]["fxgraph_cache_hit"], "cache": cache}))
print("step 00001 | loss 1.0 | dt 1ms")
open(os.environ["AUTORESEARCH_ARTIFACT"], "wb").write(b"model")
print("---")
print("val_bpb:          sealed")
for k in ("training_seconds", "total_seconds", "peak_vram_mb", "mfu_percent", "total_tokens_M", "num_steps",
          "num_params_M", "depth"):
    print(f"{k + ':':<18}1")
'''


def report(run):
    text = Path(run.log_path).read_text()
    assert run.crash_class is None, text[-3000:]
    return json.loads(text.split("REPORT ", 1)[1].splitlines()[0])


def test_warm_up_publishes_and_later_runs_read_a_private_copy(tmp_path):
    box = detect()
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    files = {"train.py": STAND_IN}
    said = []
    result = compile_warm.warm(files, run_dir, 5, sandbox=box, data=None, say=said.append)
    assert result["status"] == "published" and result["bytes"] > 0, (result, said)
    trusted = compile_cache.published(run_dir)
    assert trusted == run_dir / compile_cache.FOLDER and not (run_dir / compile_cache.WORK).exists()
    warm_log = (run_dir / "logs" / "compile-warmup.log").read_text()
    cold = json.loads(warm_log.split("REPORT ", 1)[1].splitlines()[0])
    assert cold["files_at_start"] == 0 and cold["hits"] == 0      # the warm-up compiled cold
    before = sorted(str(p.relative_to(trusted)) for p in trusted.rglob("*"))

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(STAND_IN)
    warm = report(run_train(RunSpec(src, run_dir, 1, 5, sealed=True, view=RunView(sandbox=box))))
    assert warm["cache"] == "/tmp/inductor-cache"                 # its own /tmp, as every sealed run
    assert warm["files_at_start"] > 0 and warm["hits"] >= 1       # the trusted copy was there: a cache hit
    # the read-only mount refuses the plant; what it wrote to its own copy vanished with its /tmp
    assert warm["planted"]["/tmp/.trusted-compile-cache/planted.txt"] in ("OSError", "PermissionError")
    assert warm["planted"]["/tmp/inductor-cache/planted.txt"] == "written"
    assert sorted(str(p.relative_to(trusted)) for p in trusted.rglob("*")) == before
    # a second warm-up does nothing: the trusted cache is written once
    assert compile_warm.warm(files, run_dir, 5, sandbox=box, data=None, say=said.append)["status"] == "skipped"
    # "off": cold again
    off = report(run_train(RunSpec(src, run_dir, 2, 5, sealed=True, view=RunView(sandbox=box, compile_cache="off"))))
    assert off["files_at_start"] == 0 and off["hits"] == 0


def test_warm_up_is_skipped_where_nothing_compiles_or_nothing_is_sealed(tmp_path):
    from search import knobs
    cpu_train = knobs.for_profile((REPO / "train.py").read_text(), "cpu")[0]
    said = []
    r = compile_warm.warm({"train.py": cpu_train}, tmp_path, 5, sandbox=detect(), data=None, say=said.append)
    assert r == {"status": "skipped", "reason": "the base train.py does not compile (COMPILE = False)"}
    r = compile_warm.warm({"train.py": STAND_IN}, tmp_path, 5, sandbox=Sandbox("none", "test"), data=None)
    assert r["status"] == "skipped" and "unsealed" in r["reason"]
    assert compile_warm.wants_compile((REPO / "train.py").read_text())  # the gpu train.py compiles
    assert not said and compile_cache.published(tmp_path) is None


def test_a_failed_warm_up_publishes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    broken = STAND_IN.replace("fn(torch.randn(64))", "raise SystemExit(3)")
    r = compile_warm.warm({"train.py": broken}, run_dir, 5, sandbox=detect(), data=None, say=lambda s: None)
    assert r["status"] == "failed" and compile_cache.published(run_dir) is None
    assert not (run_dir / compile_cache.WORK).exists()
