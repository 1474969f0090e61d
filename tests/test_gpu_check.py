"""scripts/gpu_check.py, the device command, run on CPU: every step at tiny shapes (--smoke), the
deadline, per-step timeouts; and the gpu profile's reference metric settings in prepare.py."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import gpu_check  # noqa: E402

STEP_NAMES = [name for name, _, _ in gpu_check.STEPS]
CPU_UNUSABLE = {"model:fa3", "model:flex"}  # no CUDA for FA3, no flex backward on CPU: skipped, saying why


def read_results(out):
    return [json.loads(line) for line in (Path(out) / "results.jsonl").read_text().splitlines()]


def test_smoke_runs_every_step_on_cpu(tiny_cache, tmp_path):
    out = tmp_path / "out"
    assert gpu_check.main(["--smoke", "--inline", "--out", str(out)]) == 0
    rows = read_results(out)
    assert [r["step"] for r in rows] == STEP_NAMES
    assert STEP_NAMES[:6] == ["env", "data", "recipe", "graph", "recipe-warm", "fallback"]  # by value
    by = {r["step"]: r for r in rows}
    for name in STEP_NAMES:
        want = "skipped" if name in CPU_UNUSABLE else "ok"
        assert by[name]["status"] == want, (name, by[name])
    for name in CPU_UNUSABLE:
        assert "not usable here" in by[name]["reason"]
    assert by["env"]["gemm_tflops"] > 0 and by["env"]["device"] == "cpu" and by["env"]["cascade"] == ["sdpa", "naive"]
    assert by["data"]["profile"] == "tiny" and len(by["data"]["fingerprint"]) == 12
    assert by["attn:sdpa"]["usable"] and by["attn:sdpa"]["eager"]["max_err_vs_fp64"] < 1e-4
    assert not by["attn:fa3"]["usable"] and "CUDA" in by["attn:fa3"]["reason"]
    assert by["model:sdpa"]["tok_per_s"] > 0 and by["model:sdpa"]["finite"]
    for name in ("recipe", "recipe-warm"):
        r = by[name]
        # run as the loop runs it: sealed (no self-evaluation), the trusted evaluation is the figure
        assert r["summary"]["profile"] == "tiny" and r["summary"]["val_bpb"] == "sealed"
        assert r["verify"]["ok"] and r["verify"]["trusted_bpb"] > 0 and "sealed run" in r["verify"]["reason"]
        assert r["clock"]["steps_seen"] > 0 and r["startup_s"] > 0 and r["tok_per_s"] > 0
        assert 0 < r["duty_cycle_300s"] < 1 and r["overhead_s"] >= r["startup_s"]
        assert r["causality"]["causal"] and (out / f"{name}.log").read_text().count("val_bpb:") == 1
        assert (out / "steps" / f"{name}.json").exists()
    assert by["recipe"]["compile_cache"] == "write" and by["recipe-warm"]["compile_cache"] == "read"
    g = by["graph"]   # fp32 on CPU: the replay is bitwise stable and the prefix does not move
    assert g["run_to_run_bitwise"] and g["prefix_bitwise"] and g["suffix_changed"] and g["vs_eager_max_diff"] < 1e-4
    f = by["fallback"]   # compile forced on with a broken compiler: eager, loudly, and it trains
    assert f["steps"] == 3 and any("model runs eagerly" in ln for ln in f["compile_lines"])
    assert f["compile"].startswith("attention: no backend compiles")
    log = (out / "gpu_check.log").read_text()
    assert "== recipe" in log and "-- recipe: ok" in log and "[model:sdpa]" in log


def test_deadline_skips_every_step_that_cannot_finish(tmp_path):
    out = tmp_path / "out"
    assert gpu_check.main(["--smoke", "--inline", "--deadline", "0", "--out", str(out)]) == 0
    rows = read_results(out)
    assert [r["step"] for r in rows] == STEP_NAMES
    assert {r["status"] for r in rows} == {"skipped"}
    assert "before the deadline" in rows[0]["reason"]
    assert "did not finish" in {r["step"]: r for r in rows}["model:sdpa"]["reason"]  # its attention step never ran


def test_plain_python_runs_a_step_in_a_subprocess_and_enforces_its_timeout(tiny_cache, tmp_path):
    """The device has python3 and no uv: the script runs as is. One step with a 1-second timeout
    (the deadline leaves no more) is killed and recorded as such."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--smoke", "--steps", "env",
                           "--deadline", str(gpu_check.FINAL_RESERVE + 1.5), "--out", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    rows = read_results(out)
    assert [(r["step"], r["status"]) for r in rows] == [("env", "timeout")], proc.stdout[-2000:]
    assert "killed after" in rows[0]["reason"] and rows[0]["seconds"] < 15
    assert proc.returncode == 1  # a step that timed out fails the check
    assert "-- env: timeout" in (out / "gpu_check.log").read_text()


def _ours(marker):
    """Pids whose command line or working directory names `marker` (this test's processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if marker in cmd or marker in cwd:
            found.append((int(entry.name), cmd[:120]))
    return found


def test_a_check_killed_mid_recipe_leaves_its_log_and_partial_result_and_no_process(tiny_cache, tmp_path):
    """The device call ends (kill -9 of the check itself) while train.py trains: what was measured
    is on disk (the run's log streamed into OUT, the step's partial result), and the step's
    process group, train.py with it, is gone within seconds."""
    out = tmp_path / "out"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))   # the check's scratch folder lands here: findable
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--smoke", "--steps", "recipe",
                             "--budget", "600", "--out", str(out)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = out / "recipe.log"
    deadline = time.time() + 240
    try:
        while time.time() < deadline and (not log.exists() or log.read_text().count("\nstep ") < 2):
            assert proc.poll() is None, "the check ended by itself"
            time.sleep(0.5)
        assert log.exists() and log.read_text().count("\nstep ") >= 2, "train.py never got going"
        assert _ours(str(scratch)), "no process of the run to kill"
    finally:
        proc.kill()    # the check itself, not its group: the step must notice and end its own
        proc.wait()
    for _ in range(40):
        if not _ours(str(scratch)):
            break
        time.sleep(0.5)
    assert not _ours(str(scratch)), _ours(str(scratch))
    partial = json.loads((out / "steps" / "recipe.json").read_text())
    assert partial["phase"] == "training" and partial["log"] == "recipe.log" and not partial.get("done")
    assert log.read_text().count("\nstep ") >= 2         # the log as it was streamed, kept
    assert not (out / "results.jsonl").exists() or "recipe" not in (out / "results.jsonl").read_text()


PROFILE_VALUES = """
import importlib, os, prepare
for profile in ("gpu", "cpu", "tiny"):
    os.environ["AUTORESEARCH_PROFILE"] = profile
    importlib.reload(prepare)
    print(profile, prepare.VAL_BUFFER_DOCS, prepare.PACK_EARLIEST_OF_EQUALS)
"""


def test_gpu_profile_packs_validation_as_the_reference_and_cpu_is_unchanged(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PROFILE_VALUES], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.split("\n")[:3] == ["gpu 1000 True", "cpu 64 False", "tiny 64 False"], proc.stderr[-2000:]


@pytest.mark.parametrize("earliest", [False, True])
def test_packer_tie_break_among_equally_long_documents(tiny_cache, monkeypatch, earliest):
    import prepare
    monkeypatch.setattr(prepare, "PACK_EARLIEST_OF_EQUALS", earliest)
    loader = prepare.make_dataloader(prepare.Tokenizer.from_directory(), 1, 7, "val", device="cpu")
    docs = [np.array([1, 10, 11]), np.array([1, 20, 21]), np.array([1, 30, 31, 32, 33])]  # read in this order
    loader._keys, loader._docs, loader.buffer_docs = [(3, 0), (3, 1), (5, 2)], docs, 0
    x, y, _ = next(loader)
    row = x[0].tolist() + y[0, -1:].tolist()
    assert row[:5] == [1, 30, 31, 32, 33]  # the longest that fits first
    assert row[5:] == ([1, 10, 11] if earliest else [1, 20, 21])
