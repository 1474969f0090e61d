"""The trusted metric: a clean process replays the recorded graph; forged figures, forged graphs
and non-causal models are caught. Models are built from (edited) real train.py sources with random
weights, so no training is needed; the worker process, prepare's evaluation, the graph replay and
the spliced causality check are real."""
import hashlib
import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

import attention as attn
import runtime
from harness import graph as G
from search import knobs
from harness.verify import EVAL_ROWS, Evaluation, eval_rows, judge_worker_output, tolerance, verify

REPO = Path(__file__).resolve().parent.parent
# train.py as a tiny-profile tag commits it (the loop writes the profile's knob values into the base)
SRC = knobs.for_profile((REPO / "train.py").read_text(), "tiny")[0]
CAUSAL_ATTENTION = "y = runtime.attention(q, k, v.to(q.dtype), window)"
BIDIRECTIONAL = ("y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), "
                 "v.to(q.dtype).transpose(1, 2)).transpose(1, 2)")
FORWARD_EMBED = "        x = x0 = norm(self.wte(idx))\n"
# Ways to see the future, each a replacement in train.py (the evaluator sees only their graphs).
NON_CAUSAL = {
    "bidirectional attention": (CAUSAL_ATTENTION, BIDIRECTIONAL),
    "the next token's embedding added in": (
        FORWARD_EMBED, FORWARD_EMBED + "        x = x + 0.5 * norm(self.wte(torch.roll(idx, -1, dims=1)))\n"),
    "a peek at every 8th position only": (
        FORWARD_EMBED, FORWARD_EMBED + "        peek = (torch.arange(idx.size(1), device=idx.device) % 8 == 7)[None, :, None]\n"
                       "        x = x + peek * norm(self.wte(torch.roll(idx, -1, dims=1)))\n"),
    "another row's future mixed in": (
        FORWARD_EMBED, FORWARD_EMBED + "        x = x + 0.5 * norm(self.wte(torch.roll(idx, (1, -3), dims=(0, 1))))\n"),
}


def load_module(source: str, folder: Path, name: str):
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_artifact(source: str, folder: Path, name="train_under_test", sha_of=None):
    """(artifact path, val_bpb of the eager model as the run itself would compute it in-process):
    the model recorded by runtime.save_model, as a sealed run saves it."""
    import prepare
    mod = load_module(source, folder, name)
    tok = prepare.Tokenizer.from_directory()
    V, T = tok.get_vocab_size(), prepare.MAX_SEQ_LEN
    cfg = mod.model_config(V, T)
    torch.manual_seed(0)
    model = mod.build_model(cfg)
    with torch.no_grad():   # random weights: c_proj starts at zero, which would hide attention
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.eval()
    with torch.no_grad():
        bpb = prepare.evaluate_bpb(model, tok, eval_rows(prepare.PROFILE))
    art = folder / f"{name}.pt"
    sha = hashlib.sha256((sha_of or source).encode()).hexdigest()
    runtime.save_model(model, art, cfg, sha, V, T)
    return art, bpb


@pytest.fixture
def prepare_source():
    return (REPO / "prepare.py").read_text()


def run_verify(art, source, prepare_source, printed, sealed=False):
    return verify(art, Evaluation(source, prepare_source, eval_rows("tiny"), printed_bpb=printed, sealed=sealed))


def test_honest_graph_verifies_and_agrees(tiny_cache, tmp_path, prepare_source):
    art, bpb = make_artifact(SRC, tmp_path)
    r = run_verify(art, SRC, prepare_source, bpb)
    assert r.ok, r.reason
    assert r.trusted_bpb == pytest.approx(bpb, abs=1e-5)       # the replayed graph is the model
    check = r.details["causality"]
    assert r.causal is True and check["checked_rows"] >= 64 and check["max_leak"] == 0.0
    serving = r.details["serving"]
    assert serving["attention_layers"] == 4 and serving["kv_bytes_per_token"] > 0
    assert r.seconds > 0 and r.details["timings"]["total"] > 0
    # the same run claiming a better number than it has is caught by the disagreement
    r = run_verify(art, SRC, prepare_source, bpb - 0.3)
    assert not r.ok and "disagrees with the trusted evaluation" in r.reason
    assert r.trusted_bpb == pytest.approx(bpb, abs=1e-5)


@pytest.mark.parametrize("how", list(NON_CAUSAL))
def test_every_way_of_seeing_the_future_fails_the_spliced_check(tiny_cache, tmp_path, prepare_source, how):
    old, new = NON_CAUSAL[how]
    assert old in SRC
    cheat = SRC.replace(old, new, 1)
    art, bpb = make_artifact(cheat, tmp_path, "cheat_" + how.split()[1])
    r = run_verify(art, cheat, prepare_source, bpb)
    assert not r.ok and r.causal is False, r.reason
    assert "causality" in r.reason
    check = r.details["causality"]
    assert check["max_leak"] > 100 * check["limit"]


def test_the_artifact_must_come_from_the_committed_train_py(tiny_cache, tmp_path, prepare_source):
    art, bpb = make_artifact(SRC, tmp_path, sha_of=SRC + "# something else\n")
    r = run_verify(art, SRC, prepare_source, bpb)
    assert not r.ok and "train_py_sha" in r.reason


def _graph_of(tmp_path):
    """A real recorded graph (and weights) to forge variants of."""
    import prepare
    mod = load_module(SRC, tmp_path, "base_train")
    cfg = mod.model_config(prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN)
    model = mod.build_model(cfg).eval()
    tokens = torch.zeros(8, prepare.MAX_SEQ_LEN, dtype=torch.long)
    with attn.plain_aten():   # as runtime.save_model records
        spec, consts = runtime.record_graph(model, tokens)
    return spec, model.state_dict(), consts


def _forge(spec, change):
    spec = json.loads(json.dumps(spec))
    change(spec)
    return json.dumps(spec)


def _node_of(spec, op_prefix):
    return next(n for n in spec["nodes"] if n["op"].startswith(op_prefix))


FORGERIES = {
    "an operator that reads a file": (lambda s: _node_of(s, "aten.tanh").update(op="aten.from_file.default"),
                                      "not on the evaluator's list"),
    "a random operator": (lambda s: _node_of(s, "aten.tanh").update(op="aten.rand_like.default"), "not on the"),
    "uninitialised memory": (lambda s: _node_of(s, "aten.tanh").update(op="aten.empty_like.default"), "not on the"),
    "an unchecked index": (lambda s: _node_of(s, "aten.tanh").update(op="aten._unsafe_index.Tensor"), "not on the"),
    "a kernel of its own": (lambda s: _node_of(s, "aten.tanh").update(op="flash_attn3.fwd.default"),
                            "not an aten operator"),
    "a Python name": (lambda s: _node_of(s, "aten.tanh").update(op="builtins.eval"), "not an aten operator"),
    "a reference forward": (lambda s: s["nodes"][0]["args"].__setitem__(0, {"ref": f"n{len(s['nodes']) - 1}"}),
                            "not defined before it"),
    "an expression to evaluate": (lambda s: s["nodes"][0]["args"].append({"sympy": "__import__('os')"}),
                                  "unknown literal kind"),
    "an input of another shape": (lambda s: s["input"].update(shape=[1, 64]), "takes int64 [1, 64]"),
    "an output that is not a node": (lambda s: s.update(output={"ref": "w:lm_head.weight"}), "not one of its nodes"),
    "dropout": (lambda s: _node_of(s, "aten._scaled_dot_product").__setitem__("args", _node_of(
        s, "aten._scaled_dot_product")["args"][:3] + [0.5] + _node_of(s, "aten._scaled_dot_product")["args"][4:]),
        "uses dropout"),
}


@pytest.mark.parametrize("how", list(FORGERIES))
def test_forged_graphs_are_refused_before_anything_runs(tiny_cache, tmp_path, how):
    spec, weights, consts = _graph_of(tmp_path)
    change, why = FORGERIES[how]
    with pytest.raises(G.GraphError, match=re.escape(why)):
        G.load(_forge(spec, change), weights, consts, rows=8, seq_len=spec["input"]["shape"][1], device="cpu")


def test_a_graph_that_writes_into_its_weights_is_stopped_while_it_runs(tiny_cache, tmp_path):
    """State carried from one batch to the next (a weight updated in place) is refused."""
    spec, weights, consts = _graph_of(tmp_path)
    n = len(spec["nodes"])
    spec["nodes"].append({"name": f"n{n}", "op": "aten.add_.Scalar", "args": [{"ref": "w:lm_head.weight"}, 1.0],
                          "kwargs": {}})
    g = G.load(json.dumps(spec), weights, consts, rows=8, seq_len=spec["input"]["shape"][1], device="cpu")
    with pytest.raises(G.GraphError, match="writes into the input, a weight or a constant"):
        g(torch.zeros(8, spec["input"]["shape"][1], dtype=torch.long))


def test_a_refused_graph_fails_the_real_evaluation(tiny_cache, tmp_path, prepare_source):
    import prepare
    spec, weights, consts = _graph_of(tmp_path)
    art = tmp_path / "forged.pt"
    torch.save({"config": {}, "state_dict": weights, "train_py_sha": hashlib.sha256(SRC.encode()).hexdigest(),
                "graph": _forge(spec, FORGERIES["an operator that reads a file"][0]), "constants": consts}, art)
    r = run_verify(art, SRC, prepare_source, None, sealed=True)
    assert not r.ok and r.trusted_bpb is None and "aten.from_file" in r.reason, r.reason
    assert prepare.MAX_SEQ_LEN == spec["input"]["shape"][1]


def test_missing_artifact_and_worker_verdicts(tmp_path):
    r = verify(tmp_path / "nope.pt", Evaluation("", "", 8, printed_bpb=1.0))
    assert not r.ok and "no model artifact" in r.reason
    good = {"ok": True, "trusted_bpb": 1.5, "causality": {"causal": True, "checked_rows": 8, "max_leak": 0.0, "limit": 1e-5,
                                                          "splice_excess": 0.0, "splice_limit": 1.0},
            "sha_match": True}
    assert judge_worker_output(good, 1.5 + 0.5 * tolerance(1.5), 1.0).ok
    assert not judge_worker_output(good, 1.5 + 2 * tolerance(1.5), 1.0).ok
    assert not judge_worker_output(dict(good, ok=False, stage="load_graph", error="GraphError: x"), 1.5, 1.0).ok
    assert "nan" in judge_worker_output(good, float("nan"), 1.0).reason
    assert not judge_worker_output(dict(good, causality={"causal": False}), None, 1.0, sealed=True).ok
    assert judge_worker_output(dict(good, trusted_bpb=True), None, 1.0, sealed=True).trusted_bpb is None


def test_the_evaluation_batch_is_the_harness_s_not_train_py_s():
    """train.py's DEVICE_BATCH_SIZE cannot choose which validation rows are read."""
    assert eval_rows("cpu") == EVAL_ROWS["cpu"] == eval_rows("tiny") and eval_rows("gpu") == 32
    assert eval_rows(None) == EVAL_ROWS["cpu"]
