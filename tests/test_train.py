"""train.py end to end on the tiny profile: summary block, artifact round trip, WSD resume, fast-fail;
its knobs (the reference's values) and the cpu/tiny profiles' values (runtime.PROFILE_KNOBS)."""

import hashlib
import math
import re
import shutil
import subprocess
import time
import sys
from pathlib import Path

import pytest
import torch

import attention as attn
import runtime
import train
from search import knobs

REPO = Path(__file__).resolve().parent.parent
SUMMARY_KEYS = ["val_bpb", "training_seconds", "total_seconds", "peak_vram_mb", "mfu_percent",
                "total_tokens_M", "num_steps", "num_params_M", "depth", "eval_seconds", "attn_backend",
                "compile", "peak_flops", "device", "profile", "data"]
KNOBS = ["DEPTH", "ASPECT_RATIO", "HEAD_DIM", "KV_HEAD_RATIO", "WINDOW_PATTERN", "DEVICE_BATCH_SIZE",
         "TOTAL_BATCH_SIZE", "MATRIX_LR", "EMBEDDING_LR", "UNEMBEDDING_LR", "SCALAR_LR", "WEIGHT_DECAY",
         "WARMUP_RATIO", "WARMDOWN_RATIO", "FINAL_LR_FRAC", "SEED"]
# On CPU in float32 with one thread a resumed run repeats the uninterrupted one bit for bit; the
# losses are compared as printed (6 decimals). A wrong resume (lost momentum, another batch, a
# schedule that is not applied) moves them by orders of magnitude more.
RESUME_TOLERANCE = 2e-6
STEP_LINE = re.compile(r"^step (\d+) \| loss ([0-9.]+)", re.M)


@pytest.fixture(scope="module")
def tiny():
    """train.py as the tiny profile runs it: its source with the profile's knob values written in."""
    return knobs.load_train("tiny")


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


def test_end_to_end_summary_and_artifact(tiny_cache, tmp_path, tiny):
    import prepare
    artifact = tmp_path / "artifacts" / "exp-0001.pt"
    proc = run_train(tiny_cache, AUTORESEARCH_TIME_BUDGET=3, AUTORESEARCH_ARTIFACT=artifact)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # a bare run on the tiny profile runs the profile's values, and says which
    assert "profile tiny: running these knobs at the profile's values" in proc.stdout
    assert "DEPTH=4" in proc.stdout and "COMPILE=False" in proc.stdout
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
    assert int(s["depth"]) == tiny.DEPTH == 4 and float(s["eval_seconds"]) > 0
    assert (s["attn_backend"], s["compile"], s["device"], s["profile"]) == ("sdpa", "off", "cpu", "tiny")
    assert s["data"] == prepare.data_fingerprint()
    # the artifact rebuilds into the same model: evaluating it again gives the printed val_bpb
    saved = torch.load(artifact, weights_only=True)
    assert set(saved) == {"config", "state_dict", "train_py_sha", "graph", "constants"}
    assert saved["train_py_sha"] == hashlib.sha256((REPO / "train.py").read_bytes()).hexdigest()
    assert saved["config"] == tiny.model_config(512, prepare.MAX_SEQ_LEN)
    model = train.build_model(saved["config"])
    model.load_state_dict(saved["state_dict"])
    torch.set_num_threads(1)
    with torch.no_grad():
        bpb = prepare.evaluate_bpb(model, prepare.Tokenizer.from_directory(), tiny.DEVICE_BATCH_SIZE)
    assert abs(bpb - float(s["val_bpb"])) < 2e-6
    # ...and so does its recorded graph, replayed as the trusted evaluator replays it
    from harness import graph
    g = graph.load(saved["graph"], saved["state_dict"], saved["constants"], rows=8,
                   seq_len=prepare.MAX_SEQ_LEN, device="cpu")
    with torch.no_grad():
        replayed = prepare.evaluate_bpb(g, prepare.Tokenizer.from_directory(), 8)
    assert abs(replayed - float(s["val_bpb"])) < 2e-6


def test_build_model_round_trip(tmp_path, tiny):
    torch.manual_seed(0)
    cfg = tiny.model_config(512, 64)
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
    # the tiny profile's train.py at a smaller model (one micro-batch a step): the same resume path
    source, _ = knobs.for_profile((REPO / "train.py").read_text(), "tiny")
    script = tmp_path / "train.py"
    script.write_text(knobs.set_knobs(source, {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256}))
    env = dict(tiny_cache, AUTORESEARCH_KNOBS_AS_WRITTEN="1")
    straight = run_train(env, cwd=tmp_path, script=script, AUTORESEARCH_STEPS=8, AUTORESEARCH_DECAY_STEPS=2)
    short = run_train(env, cwd=tmp_path, script=script, AUTORESEARCH_STEPS=6, AUTORESEARCH_DECAY_STEPS=2,
                      AUTORESEARCH_SAVE_STATE=state)
    resumed = run_train(env, cwd=tmp_path, script=script, AUTORESEARCH_STEPS=8, AUTORESEARCH_DECAY_STEPS=2,
                        AUTORESEARCH_RESUME_STATE=state)
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


def test_a_compile_failure_falls_back_to_eager_loudly(tiny_cache, tmp_path):
    """COMPILE on, with a C++ compiler that does not work (CXX=/bin/false: inductor's CPU code
    cannot build, a real failure, not a mock): attention, the model and the reference Muon step
    each fall back to eager with one loud line, the summary says why, and the run trains exactly
    as the eager run does."""
    source, _ = knobs.for_profile((REPO / "train.py").read_text(), "tiny")
    # a smaller model (one micro-batch a step): what fails to compile is the same code
    source = knobs.set_knobs(source, {"DEPTH": 2, "DEVICE_BATCH_SIZE": 4, "TOTAL_BATCH_SIZE": 256})
    (tmp_path / "train.py").write_text(knobs.set_knobs(source, {"COMPILE": True, "MUON_VARIANT": "reference"}))
    (tmp_path / "eager.py").write_text(knobs.set_knobs(source, {"MUON_VARIANT": "reference"}))
    env = dict(tiny_cache, AUTORESEARCH_KNOBS_AS_WRITTEN="1", AUTORESEARCH_STEPS="2", CXX="/bin/false",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    broken = run_train(env, cwd=tmp_path, script=tmp_path / "train.py")
    eager = run_train(env, cwd=tmp_path, script=tmp_path / "eager.py")
    assert broken.returncode == 0, broken.stdout[-3000:] + broken.stderr[-3000:]
    out = broken.stdout
    for name in ("model", "muon step", "evaluation"):
        assert f"COMPILE FAILED: {name} runs eagerly (InductorError" in out, name
    assert "none works under compile; sdpa runs eagerly" in out
    compile_line = re.search(r"^compile:\s+(.*)$", out, re.M).group(1)
    assert compile_line.startswith("attention: no backend compiles") and "model: InductorError" in compile_line
    assert losses(out) == losses(eager.stdout) and len(losses(out)) == 2
    assert re.search(r"^compile:\s+off$", eager.stdout, re.M)


def test_knobs_are_one_line_literals_at_the_reference_values(monkeypatch):
    source = (REPO / "train.py").read_text()
    for name in KNOBS:
        found = re.findall(rf"^{name} = (.+?)  # \S", source, re.M)
        assert len(found) == 1, f"{name} must be one `NAME = literal  # why` line"
        assert repr(eval(found[0])) == repr(getattr(train, name))  # a plain literal
    assert not re.findall(r"^GPU_\w+ =", source, re.M)  # no multipliers: the values are what runs on a GPU
    gpu = train.model_config(8192, 2048)
    assert (gpu["n_layer"], gpu["n_embd"], gpu["n_head"], gpu["head_dim"]) == (8, 512, 4, 128)  # the reference shape
    assert gpu["embed_dtype"] == "bfloat16"
    monkeypatch.setattr(train, "KV_HEAD_RATIO", 2)
    monkeypatch.setattr(train, "DEPTH", 4)
    cfg = train.model_config(8192, 2048)
    assert cfg["n_layer"] == 4 and cfg["n_kv_head"] * 2 == cfg["n_head"]


# The values the cpu and tiny profiles ran before train.py held the reference's (docs/gpu.md:
# the old base knobs and their gpu multipliers); the recorded CPU baseline rests on them.
CPU_VALUES = {"DEPTH": 4, "ASPECT_RATIO": 32, "HEAD_DIM": 64, "DEVICE_BATCH_SIZE": 8, "TOTAL_BATCH_SIZE": 2048,
              "MATRIX_LR": 0.02, "EMBEDDING_LR": 0.3, "WEIGHT_DECAY": 0.0, "MUON_VARIANT": "classic",
              "EMBED_DTYPE": "float32", "GRAD_CLIP": 1.0, "STARTUP_STEPS": 3, "COMPILE": False}
GPU_VALUES = {"DEPTH": 8, "ASPECT_RATIO": 64, "HEAD_DIM": 128, "DEVICE_BATCH_SIZE": 128, "TOTAL_BATCH_SIZE": 2 ** 19,
              "MATRIX_LR": 0.04, "EMBEDDING_LR": 0.6, "WEIGHT_DECAY": 0.2, "MUON_VARIANT": "reference",
              "EMBED_DTYPE": "bfloat16", "GRAD_CLIP": 0.0, "STARTUP_STEPS": 10, "COMPILE": True}


def test_train_py_is_the_reference_and_the_small_profiles_run_the_old_values(tiny):
    assert {k: getattr(train, k) for k in GPU_VALUES} == GPU_VALUES
    assert {k: getattr(tiny, k) for k in CPU_VALUES} == CPU_VALUES
    source = (REPO / "train.py").read_text()
    cpu_source, changes = knobs.for_profile(source, "cpu")
    assert changes == CPU_VALUES and knobs.for_profile(source, "tiny")[1] == CPU_VALUES
    assert knobs.for_profile(source, "gpu") == (source, {})
    assert knobs.for_profile(cpu_source, "cpu") == (cpu_source, {})  # applied once: nothing left to apply
    # the harness reads the table from runtime.py's text; runtime applies the same in memory
    assert runtime.profile_changes(knobs.values(source), "cpu") == CPU_VALUES
    # a knob already moved off train.py's value keeps it (the tests' small models, a user's edit)
    moved = knobs.set_knobs(source, {"DEPTH": 2, "TOTAL_BATCH_SIZE": 256})
    new, changes = knobs.for_profile(moved, "cpu")
    assert "DEPTH" not in changes and "TOTAL_BATCH_SIZE" not in changes and changes["HEAD_DIM"] == 64
    assert knobs.values(new)["DEPTH"] == 2
    # only the value lines change: a diff of the tag's base commit is the knob block alone
    changed = [i for i, (a, b) in enumerate(zip(source.splitlines(), cpu_source.splitlines())) if a != b]
    call = [i for i in changed if knobs.PROFILE_CALL in source.splitlines()[i]]
    assert len(call) == 1 and cpu_source.splitlines()[call[0]].strip() == knobs.PROFILE_CALL_DONE
    knob_lines = [i for i in changed if i not in call]
    assert len(knob_lines) == len(CPU_VALUES) and max(knob_lines) < source.splitlines().index("# Runtime") + 5
    # ... and the bare run's in-memory rewrite is gone, so the file runs as it reads
    assert knobs.PROFILE_CALL not in cpu_source and knobs.PROFILE_CALL in source


USE_PROFILE_CASES = [("cpu", False, "{'DEPTH': 4} 4 100"), ("tiny", False, "{'DEPTH': 4} 4 100"),
                     ("gpu", False, "{} 8 100"), ("cpu", True, "{} 8 100")]
# One fresh process (runtime imported once) runs every case in turn, each on a fresh module and its
# own environment, and prints each case's output lines as one JSON line.
USE_PROFILE = """
import contextlib, io, json, os, runtime, sys, types
for profile, as_written in json.loads(sys.argv[1]):
    os.environ.pop("AUTORESEARCH_KNOBS_AS_WRITTEN", None)
    if as_written:
        os.environ["AUTORESEARCH_KNOBS_AS_WRITTEN"] = "1"
    m = types.ModuleType("fake_train"); sys.modules["fake_train"] = m
    m.DEPTH, m.HEAD_DIM, m.SEED = 8, 100, 42
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print(runtime.use_profile_knobs("fake_train", profile), m.DEPTH, m.HEAD_DIM)
    print(json.dumps(out.getvalue().strip().splitlines()))
"""


@pytest.fixture(scope="module")
def use_profile_outputs():
    """Each case's output lines, from one process (importing runtime is the cost, not the calls)."""
    import json
    import os
    env = dict(os.environ)
    env.pop("AUTORESEARCH_KNOBS_AS_WRITTEN", None)
    cases = [[profile, as_written] for profile, as_written, _ in USE_PROFILE_CASES]
    proc = subprocess.run([sys.executable, "-c", USE_PROFILE, json.dumps(cases)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(cases), proc.stdout
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("case", range(len(USE_PROFILE_CASES)),
                         ids=[f"{p}-{w}-{want}" for p, w, want in USE_PROFILE_CASES])
def test_use_profile_knobs_by_hand_and_as_written_in_the_harness(case, use_profile_outputs):
    profile, _, want = USE_PROFILE_CASES[case]
    out = use_profile_outputs[case]
    assert out[-1] == want
    assert (f"profile {profile}: running these knobs at the profile's values" in out[0]) == want.startswith("{'")


def test_wsd_schedule_under_a_step_budget():
    plan = {"budget": 300.0, "steps": 10, "decay_steps": 4, "warmup_steps": 2}
    lrm = [train.lr_multiplier(s, 0.0, plan) for s in range(10)]
    assert lrm[:2] == [0.5, 1.0] and lrm[2:6] == [1.0] * 4  # warmup, then stable until step N-D
    assert lrm[6] < 1.0 and lrm[6:] == sorted(lrm[6:], reverse=True)
    assert lrm[-1] == pytest.approx(train.FINAL_LR_FRAC)
    assert [train.in_decay(s, 0.0, plan) for s in (5, 6)] == [False, True]


# --- peak FLOPs by exact name, MFU arithmetic, the reference Muon, offline hub ----------


def test_peak_flops_match_exact_device_names(capsys):
    assert runtime.peak_flops_for("NVIDIA H100 80GB HBM3") == pytest.approx(989.4e12)  # SXM
    assert runtime.peak_flops_for("NVIDIA H100 PCIe") == pytest.approx(756.5e12)  # not SXM's peak
    assert runtime.peak_flops_for("NVIDIA H100 NVL") == pytest.approx(835.5e12)
    assert runtime.peak_flops_for("nvidia  h200") == pytest.approx(989.4e12)  # case and spacing ignored
    for name in ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA B200",
                 "NVIDIA L40S", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090", "NVIDIA GH200 480GB"):
        assert runtime.peak_flops_for(name) > 1e14, name
    # no substring guesses; GB10 has no datasheet bf16 figure, so peak_flops() measures a GEMM there
    for name in ("NVIDIA H100", "NVIDIA H100 PCIe (MIG 1g.10gb)", "Tesla T4", "NVIDIA GB10"):
        assert runtime.peak_flops_for(name) == 0.0
    assert runtime.peak_flops(torch.device("cpu")) == (0.0, "none on CPU")
    assert capsys.readouterr().out == ""


def test_mfu_is_flops_of_the_counted_steps_over_their_seconds():
    assert runtime.mfu_percent(1e12, 10, 2.0, 1e13) == pytest.approx(50.0)
    # a resumed run: 400 steps before (not in this process), 100 counted here in 20 s. Dividing the
    # resumed 100 s of training by the 100 local steps would read 5x too low.
    assert runtime.mfu_percent(2e12, 100, 20.0, 1e14) == pytest.approx(10.0)
    for args in ((1e12, 0, 2.0, 1e13), (1e12, 10, 0.0, 1e13), (1e12, 10, 2.0, 0.0)):
        assert runtime.mfu_percent(*args) == 0.0


def test_ptxas_is_chosen_by_its_version(tmp_path, monkeypatch, capsys):
    """ensure_ptxas takes a ptxas only when `ptxas --version` says CUDA 13 or later."""
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    fake.chmod(0o755)
    assert runtime.ptxas_version(str(fake)) == (12, 4)
    assert runtime.ptxas_version(str(tmp_path / "missing")) is None
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    monkeypatch.setattr(runtime.glob, "glob", lambda pattern: [str(fake)])
    assert runtime.ensure_ptxas() is None and "no CUDA 13 ptxas" in capsys.readouterr().out
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n")
    assert runtime.ensure_ptxas() == str(fake) and runtime.os.environ["TRITON_PTXAS_PATH"] == str(fake)


def test_polar_express_orthogonalises_and_normuon_keeps_the_norm():
    g = torch.randn(3, 64, 32, generator=torch.Generator().manual_seed(0))
    x = train.polar_express(g)
    s = torch.linalg.svdvals(x)
    assert x.shape == g.shape and s.min() > 0.5 and s.max() < 1.3  # singular values pulled to ~1
    second = torch.zeros(3, 64, 1)
    scaled = train.normuon_scale(x, second, 0.95)
    assert torch.allclose(scaled.norm(dim=(-2, -1)), x.norm(dim=(-2, -1)), rtol=1e-4)
    assert second.abs().sum() > 0  # the running second moment moved
    rows = scaled.square().mean(-1)
    assert rows.std() / rows.mean() < x.square().mean(-1).std() / x.square().mean(-1).mean()  # rows evened out


def test_reference_muon_decays_cautiously_with_the_scaled_lr():
    p = nn_param([[1.0, -1.0], [1.0, -1.0], [1.0, -1.0]])  # tall: lr scaled by sqrt(3/2)
    opt = train.Muon([p], lr=0.1, momentum=0.0, weight_decay=0.5, variant="reference")
    p.grad = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])  # update agrees in sign with column 0 only
    before = p.detach().clone()
    opt.step()
    update = before - p.detach()
    lr = 0.1 * 1.5 ** 0.5
    # without decay the two columns would move by the same orthogonalised step
    p2 = nn_param(before.tolist())
    opt2 = train.Muon([p2], lr=0.1, momentum=0.0, weight_decay=0.0, variant="reference")
    p2.grad = p.grad.clone()
    opt2.step()
    plain = before - p2.detach()
    assert torch.allclose(update[:, 1], plain[:, 1])  # sign disagrees: no decay there
    assert torch.allclose(update[:, 0] - plain[:, 0], lr * 0.5 * before[:, 0], atol=1e-6)  # decayed, scaled lr
    with pytest.raises(ValueError, match="MUON_VARIANT"):
        train.Muon([p], lr=0.1, momentum=0.0, weight_decay=0.0, variant="fancy")


def nn_param(rows):
    return torch.nn.Parameter(torch.tensor(rows))


def test_schedule_fades_the_reference_decay_only(tiny, monkeypatch):
    torch.manual_seed(0)
    model = tiny.build_model(tiny.model_config(512, 64))
    plan = {"budget": 100.0, "steps": 0, "decay_steps": 0, "warmup_steps": 0}
    monkeypatch.setattr(tiny, "WEIGHT_DECAY", 0.2)
    classic = tiny.MuonAdamW(model)
    monkeypatch.setattr(tiny, "MUON_VARIANT", "reference")
    ref = tiny.MuonAdamW(model)
    for opt in (ref, classic):
        tiny.apply_schedule(opt, 5, 75.0, plan)
    assert [g["weight_decay"] for g in ref.muon.param_groups] == pytest.approx([0.05] * len(ref.muon.param_groups))
    assert {g["weight_decay"] for g in classic.muon.param_groups} == {0.2}
    # under a step budget: untouched before the cool-down whatever the budget (resumable), then faded
    for n in (10, 30):
        plan = {"steps": n, "decay_steps": 4, "budget": 1.0}
        assert [train.weight_decay_multiplier(s, 0.0, plan) for s in range(n - 5, n)] == [1.0, 0.75, 0.5, 0.25, 0.0]


def test_reference_recipe_trains_on_cpu_at_a_tiny_shape(monkeypatch):
    """train.py's own (gpu) recipe, optimizer and bf16 embeddings under autocast, two layers: a
    few steps lower the loss."""
    torch.manual_seed(0)
    monkeypatch.setattr(train, "DEPTH", 2)
    cfg = train.model_config(64, 16)
    assert cfg["embed_dtype"] == "bfloat16"
    model = train.build_model(cfg)
    opt = train.MuonAdamW(model)
    assert {g["variant"] for g in opt.muon.param_groups} == {"reference"}
    plan = {"budget": 100.0, "steps": 8, "decay_steps": 0, "warmup_steps": 0}
    x = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for step in range(8):
        train.apply_schedule(opt, step, 0.0, plan)
        with torch.amp.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 64), x[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert model.wte.weight.dtype == torch.bfloat16 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0] - 0.5, losses


def run_python(code, env=None, timeout=60):
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


LOAD_FA3 = """
import os, time, attention
t = time.monotonic()
try:
    attention.load_fa3()
    print("loaded")
except Exception as e:
    print("failed", type(e).__name__)
print("seconds", round(time.monotonic() - t, 2))
print("offline", os.environ.get("HF_HUB_OFFLINE"))
"""


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:9"])
def test_load_fa3_fails_fast_when_the_hub_is_unreachable(endpoint, tmp_path):
    """No network here: the hub check sets HF_HUB_OFFLINE=1 and the kernels load fails at once."""
    import os
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_ENDPOINT")}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty hub cache: nothing to load offline
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    proc = run_python(LOAD_FA3, env)
    out = proc.stdout
    assert "failed" in out and "offline 1" in out, out + proc.stderr[-2000:]
    assert float(re.search(r"seconds (\S+)", out).group(1)) < 15  # not a minutes-long retry storm


def test_hub_check_has_a_deadline_and_is_skipped_when_offline_is_set(monkeypatch):
    t = time.monotonic()
    reason = attn.hub_unreachable_reason("http://127.0.0.1:9", deadline=1.0)
    assert "cannot connect to 127.0.0.1:9" in reason and time.monotonic() - t < 3
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(attn, "hub_unreachable_reason", lambda *a, **k: pytest.fail("network tried"))
    assert attn.go_offline_if_hub_unreachable() == "HF_HUB_OFFLINE is set"


def test_reference_muon_state_round_trips():
    """A saved state (momentum and NorMuon second moment) resumes to the same next step."""
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(6, 4, generator=g)) for _ in range(2)]
    opt = train.Muon(params, lr=0.05, momentum=0.9, weight_decay=0.1, variant="reference")
    grads = [[torch.randn(6, 4, generator=g) for _ in params] for _ in range(3)]

    def step(o, ps, gs):
        for p, gr in zip(ps, gs):
            p.grad = gr.clone()
        o.step()
    for gs in grads[:2]:
        step(opt, params, gs)
    import copy
    saved = copy.deepcopy(opt.state_dict())  # as torch.save would: not the live buffers
    assert {"momentum_buffer", "second_buffer"} <= set(saved["state"][0])
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = train.Muon(copies, lr=0.05, momentum=0.9, weight_decay=0.1, variant="reference")
    resumed.load_state_dict(saved)
    step(opt, params, grads[2])
    step(resumed, copies, grads[2])
    for a, b in zip(params, copies):
        assert torch.equal(a, b)
    fresh = [torch.nn.Parameter(p.detach().clone()) for p in copies]
    step(train.Muon(fresh, lr=0.05, momentum=0.9, weight_decay=0.1, variant="reference"), fresh, grads[2])
    assert not torch.equal(fresh[0], copies[0])  # without the state the step differs
