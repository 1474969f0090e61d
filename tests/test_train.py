"""train.py end to end on the tiny profile: summary block, artifact round trip, WSD resume, fast-fail."""

import hashlib
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train

REPO = Path(__file__).resolve().parent.parent
SUMMARY_KEYS = ["val_bpb", "training_seconds", "total_seconds", "peak_vram_mb", "mfu_percent",
                "total_tokens_M", "num_steps", "num_params_M", "depth", "eval_seconds", "attn_backend",
                "device", "profile", "data"]
KNOBS = ["DEPTH", "ASPECT_RATIO", "HEAD_DIM", "KV_HEAD_RATIO", "WINDOW_PATTERN", "DEVICE_BATCH_SIZE",
         "TOTAL_BATCH_SIZE", "MATRIX_LR", "EMBEDDING_LR", "UNEMBEDDING_LR", "SCALAR_LR", "WEIGHT_DECAY",
         "WARMUP_RATIO", "WARMDOWN_RATIO", "FINAL_LR_FRAC", "SEED"]
# On CPU in float32 with one thread a resumed run repeats the uninterrupted one bit for bit; the
# losses are compared as printed (6 decimals). A wrong resume (lost momentum, another batch, a
# schedule that is not applied) moves them by orders of magnitude more.
RESUME_TOLERANCE = 2e-6
STEP_LINE = re.compile(r"^step (\d+) \| loss ([0-9.]+)", re.M)


def run_train(env, cwd=REPO, script=None, **extra):
    env = dict(env, **{k: str(v) for k, v in extra.items()})
    proc = subprocess.run([sys.executable, str(script or REPO / "train.py")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc


def summary_of(stdout):
    block = stdout[stdout.rindex("\n---\n") + 5:].splitlines()
    return block


def losses(stdout):
    return {int(s): float(v) for s, v in STEP_LINE.findall(stdout)}


def test_end_to_end_summary_and_artifact(tiny_cache, tmp_path):
    import prepare
    artifact = tmp_path / "artifacts" / "exp-0001.pt"
    proc = run_train(tiny_cache, AUTORESEARCH_TIME_BUDGET=3, AUTORESEARCH_ARTIFACT=artifact)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = summary_of(proc.stdout)
    assert [ln.split(":")[0] for ln in lines] == SUMMARY_KEYS  # exactly these keys, in this order
    for ln in lines:
        assert re.match(r"^[a-z_M]+:\s+\S", ln) and len(ln.split(":")[0]) + 1 <= 18
        assert ln[18] != " " and ln[:18].rstrip() == ln.split(":")[0] + ":"  # key left-justified in 18
    s = {ln[:18].strip()[:-1]: ln[18:] for ln in lines}
    vocab_bound = math.log2(512) * 4  # uniform guessing costs log2(V) bits/token; tokens are >= 1/4 byte
    assert 0 < float(s["val_bpb"]) < vocab_bound
    assert float(s["training_seconds"]) >= 3.0
    assert float(s["total_seconds"]) >= float(s["training_seconds"])
    assert float(s["peak_vram_mb"]) > 50  # max RSS of a process that imported torch
    assert float(s["mfu_percent"]) == 0.0  # CPU: no peak figure, reported as zero
    assert int(s["num_steps"]) >= 1 and float(s["num_params_M"]) > 0
    assert int(s["depth"]) == train.DEPTH and float(s["eval_seconds"]) > 0
    assert (s["attn_backend"], s["device"], s["profile"]) == ("sdpa", "cpu", "tiny")
    assert s["data"] == prepare.data_fingerprint()
    # the artifact rebuilds into the same model: evaluating it again gives the printed val_bpb
    saved = torch.load(artifact, weights_only=True)
    assert set(saved) == {"config", "state_dict", "train_py_sha"}
    assert saved["train_py_sha"] == hashlib.sha256((REPO / "train.py").read_bytes()).hexdigest()
    model = train.build_model(saved["config"])
    model.load_state_dict(saved["state_dict"])
    torch.set_num_threads(1)
    with torch.no_grad():
        bpb = prepare.evaluate_bpb(model, prepare.Tokenizer.from_directory(), train.DEVICE_BATCH_SIZE)
    assert abs(bpb - float(s["val_bpb"])) < 2e-6


def test_build_model_round_trip(tmp_path):
    torch.manual_seed(0)
    cfg = train.model_config(512, 64, "tiny")
    cfg["n_kv_head"] = cfg["n_head"] // 2  # GQA, so the config really carries it
    model = train.build_model(cfg)
    with torch.no_grad():  # move off the initialisation (zero projections would hide a bad load)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = tmp_path / "a.pt"
    torch.save({"config": cfg, "state_dict": model.state_dict(), "train_py_sha": "x"}, path)
    saved = torch.load(path, weights_only=True)
    rebuilt = train.build_model(saved["config"])
    rebuilt.load_state_dict(saved["state_dict"])
    idx = torch.randint(0, 512, (2, 64))
    with torch.no_grad():
        a, b = model(idx), rebuilt(idx)
    assert a.dtype == torch.float32 and a.shape == (2, 64, 512)
    assert torch.equal(a, b)
    assert a.abs().max() <= cfg["softcap"]  # soft-capped
    fresh = train.build_model(cfg)
    with torch.no_grad():
        assert not torch.equal(fresh(idx), a)  # and the load is what made them equal


def test_resume_from_pre_decay_state_matches_an_uninterrupted_run(tiny_cache, tmp_path):
    """Hyperband promotion: a 6-step run saves at its pre-decay point (step 4); resuming that state
    with an 8-step budget must reproduce an uninterrupted 8-step run step for step."""
    state = tmp_path / "state.pt"
    straight = run_train(tiny_cache, AUTORESEARCH_STEPS=8, AUTORESEARCH_DECAY_STEPS=2)
    short = run_train(tiny_cache, AUTORESEARCH_STEPS=6, AUTORESEARCH_DECAY_STEPS=2, AUTORESEARCH_SAVE_STATE=state)
    resumed = run_train(tiny_cache, AUTORESEARCH_STEPS=8, AUTORESEARCH_DECAY_STEPS=2, AUTORESEARCH_RESUME_STATE=state)
    for p in (straight, short, resumed):
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    a, b, c = losses(straight.stdout), losses(short.stdout), losses(resumed.stdout)
    assert sorted(a) == list(range(1, 9)) and sorted(b) == list(range(1, 7)) and sorted(c) == [5, 6, 7, 8]
    for s in (1, 2, 3, 4):  # same stable prefix: the schedule before the cool-down ignores the budget
        assert abs(a[s] - b[s]) < 1e-6
    for s in (5, 6, 7, 8):
        assert abs(a[s] - c[s]) < RESUME_TOLERANCE, (s, a[s], c[s])
    assert abs(a[6] - b[6]) > 10 * RESUME_TOLERANCE  # the cool-down's effect dwarfs the tolerance
    bpb = [float(re.search(r"^val_bpb:\s+(\S+)", p.stdout, re.M).group(1)) for p in (straight, resumed)]
    assert abs(bpb[0] - bpb[1]) < RESUME_TOLERANCE
    assert re.search(r"^num_steps:\s+8$", resumed.stdout, re.M)


def test_nan_fast_fail(tiny_cache, tmp_path):
    """An absurd learning rate (edited into a copy of train.py, as the loop would) fails fast."""
    source = (REPO / "train.py").read_text()
    edited = source
    for knob in ("MATRIX_LR", "UNEMBEDDING_LR"):
        edited, n = re.subn(rf"^{knob} = \S+", f"{knob} = 1e30", edited, flags=re.M)
        assert n == 1
    (tmp_path / "train.py").write_text(edited)
    shutil.copy(REPO / "prepare.py", tmp_path / "prepare.py")
    proc = run_train(tiny_cache, cwd=tmp_path, script=tmp_path / "train.py", AUTORESEARCH_STEPS=5)
    assert proc.returncode != 0
    assert re.search(r"^FAIL: (loss is nan|loss exploded)", proc.stdout, re.M), proc.stdout[-1500:]
    assert "val_bpb:" not in proc.stdout


def test_knobs_are_one_line_literals_that_reach_every_profile(monkeypatch):
    source = (REPO / "train.py").read_text()
    for name in KNOBS:
        found = re.findall(rf"^{name} = (.+?)  # \S", source, re.M)
        assert len(found) == 1, f"{name} must be one `NAME = literal  # why` line"
        assert repr(eval(found[0])) == repr(getattr(train, name))  # a plain literal
    gpu = train.model_config(8192, 2048, "gpu")
    assert (gpu["n_layer"], gpu["n_embd"], gpu["n_head"], gpu["head_dim"]) == (8, 512, 4, 128)  # the reference shape
    monkeypatch.setattr(train, "DEPTH", 2)
    assert train.model_config(512, 64, "cpu")["n_layer"] == 2
    monkeypatch.setattr(train, "KV_HEAD_RATIO", 2)
    gpu = train.model_config(8192, 2048, "gpu")
    assert gpu["n_layer"] == 4 and gpu["n_kv_head"] * 2 == gpu["n_head"]


def test_wsd_schedule_under_a_step_budget():
    plan = {"budget": 300.0, "steps": 10, "decay_steps": 4, "warmup_steps": 2}
    lrm = [train.lr_multiplier(s, 0.0, plan) for s in range(10)]
    assert lrm[:2] == [0.5, 1.0] and lrm[2:6] == [1.0] * 4  # warmup, then stable until step N-D
    assert lrm[6] < 1.0 and lrm[6:] == sorted(lrm[6:], reverse=True)
    assert lrm[-1] == pytest.approx(train.FINAL_LR_FRAC)
    assert [train.in_decay(s, 0.0, plan) for s in (5, 6)] == [False, True]
