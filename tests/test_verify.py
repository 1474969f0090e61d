"""The trusted metric: a separate process re-evaluates the saved model; forged figures and
non-causal models are caught. Models are built from (edited) real train.py sources with random
weights, so no training is needed; the worker process, prepare's evaluation and the probe are real."""
import hashlib
import importlib.util
from pathlib import Path

import pytest
import torch

from harness.verify import judge_worker_output, tolerance, verify

REPO = Path(__file__).resolve().parent.parent
SRC = (REPO / "train.py").read_text()
NON_CAUSAL = ("y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)",
              "y = F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=gqa)")


def load_module(source: str, folder: Path, name: str):
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_artifact(source: str, folder: Path, name="train_under_test", sha_of=None):
    """(artifact path, val_bpb as the run itself would compute it in-process)."""
    import prepare
    mod = load_module(source, folder, name)
    tok = prepare.Tokenizer.from_directory()
    cfg = mod.model_config(tok.get_vocab_size(), prepare.MAX_SEQ_LEN, prepare.PROFILE)
    torch.manual_seed(0)
    model = mod.build_model(cfg)
    with torch.no_grad():   # random weights: c_proj starts at zero, which would hide attention
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.eval()
    with torch.no_grad():
        bpb = prepare.evaluate_bpb(model, tok, 8)
    art = folder / f"{name}.pt"
    sha = hashlib.sha256((sha_of or source).encode()).hexdigest()
    torch.save({"config": cfg, "state_dict": model.state_dict(), "train_py_sha": sha}, art)
    return art, bpb


@pytest.fixture
def prepare_source():
    return (REPO / "prepare.py").read_text()


def test_honest_model_verifies_and_agrees(tiny_cache, tmp_path, prepare_source):
    art, bpb = make_artifact(SRC, tmp_path)
    r = verify(art, train_source=SRC, prepare_source=prepare_source, printed_bpb=bpb, batch_size=8)
    assert r.ok, r.reason
    assert r.trusted_bpb == pytest.approx(bpb, abs=1e-4)
    assert r.causal is True and r.details["probe"]["max_future_leak"] <= r.details["probe"]["limit"]
    assert r.seconds > 0 and r.details["timings"]["total"] > 0
    # the same run claiming a better number than it has is caught by the disagreement
    r = verify(art, train_source=SRC, prepare_source=prepare_source, printed_bpb=bpb - 0.3, batch_size=8)
    assert not r.ok and "disagrees with the trusted re-evaluation" in r.reason
    assert r.trusted_bpb == pytest.approx(bpb, abs=1e-4)


def test_non_causal_attention_fails_the_probe(tiny_cache, tmp_path, prepare_source):
    assert NON_CAUSAL[0] in SRC
    cheat = SRC.replace(*NON_CAUSAL)
    art, bpb = make_artifact(cheat, tmp_path, "cheat_noncausal")
    r = verify(art, train_source=cheat, prepare_source=prepare_source, printed_bpb=bpb, batch_size=8)
    assert not r.ok and r.causal is False
    assert "causality probe failed" in r.reason
    assert r.details["probe"]["max_future_leak"] > 10 * r.details["probe"]["limit"]


def test_code_mismatch_and_import_time_patching_are_caught(tiny_cache, tmp_path, prepare_source):
    # artifact from one train.py, verification asked for another: the run did not run the commit
    art, bpb = make_artifact(SRC, tmp_path, sha_of=SRC + "# something else\n")
    r = verify(art, train_source=SRC, prepare_source=prepare_source, printed_bpb=bpb, batch_size=8)
    assert not r.ok and "train_py_sha" in r.reason
    # a train.py that patches the evaluation at import (the guard refuses it; verify sees it anyway)
    patched = SRC.replace("import prepare\n", "import prepare\nprepare.EVAL_TOKENS = 64\n", 1)
    art, bpb = make_artifact(patched, tmp_path, "cheat_patch")
    r = verify(art, train_source=patched, prepare_source=prepare_source, printed_bpb=bpb, batch_size=8)
    assert not r.ok and "prepare.EVAL_TOKENS" in r.reason


def test_missing_artifact_and_worker_verdicts(tmp_path):
    r = verify(tmp_path / "nope.pt", train_source="", prepare_source="", printed_bpb=1.0)
    assert not r.ok and "no model artifact" in r.reason
    good = {"ok": True, "trusted_bpb": 1.5, "probe": {"causal": True}, "sha_match": True,
            "patched": [], "patched_at_import": []}
    assert judge_worker_output(good, 1.5 + 0.5 * tolerance(1.5), 1.0).ok
    assert not judge_worker_output(good, 1.5 + 2 * tolerance(1.5), 1.0).ok
    assert not judge_worker_output(dict(good, ok=False, stage="build", error="KeyError: x"), 1.5, 1.0).ok
    assert "nan" in judge_worker_output(good, float("nan"), 1.0).reason


def test_batch_size_follows_the_run_and_is_bounded_on_gpu():
    from harness.knobs import read_knobs, set_knobs
    from harness.verify import GPU_MAX_ROWS, batch_size_for
    k = read_knobs(SRC)
    rows, mult = k["DEVICE_BATCH_SIZE"].value, k["GPU_BATCH_MULT"].value
    assert batch_size_for(SRC, "cpu") == rows and batch_size_for(SRC, "tiny") == rows
    gpu = batch_size_for(SRC, "gpu")                 # rows x mult in the run's own eval
    assert gpu <= GPU_MAX_ROWS and (rows * mult) % gpu == 0
    assert batch_size_for(set_knobs(SRC, {"DEVICE_BATCH_SIZE": 5, "GPU_BATCH_MULT": 8}), "gpu") == 20
    assert batch_size_for(set_knobs(SRC, {"DEVICE_BATCH_SIZE": 4, "GPU_BATCH_MULT": 2}), "gpu") == 8
