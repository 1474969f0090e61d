"""Small models and hand-made graphs for the replay's trust tests (tests/test_replay_*.py).

The models are real torch modules recorded by runtime.record_graph, as runtime.save_model records
train.py's model; the graphs are then replayed by harness/graph.py and checked by the trusted
evaluator's Checked (in-process) or by the whole worker (harness.verify, a clean process).
"""
import hashlib
import json

import torch

import runtime
from harness import graph as G
from harness.eval_worker import Checked
from harness.verify import Evaluation, eval_rows, verify

ROWS = 8          # the tiny profile's evaluation batch (harness.verify.EVAL_ROWS)
WIDTH = 32


class Causal(torch.nn.Module):
    """A small honest language model: embeddings, a causal running mean, a projection to logits."""

    def __init__(self, vocab, seq_len, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.wte = torch.nn.Parameter(torch.randn(vocab, WIDTH, generator=g))
        self.head = torch.nn.Parameter(torch.randn(vocab, WIDTH, generator=g) * 0.3)
        self.vocab, self.seq_len = vocab, seq_len

    def features(self, idx):
        x = self.wte[idx]
        steps = torch.arange(1, idx.size(1) + 1, device=idx.device, dtype=x.dtype)[None, :, None]
        return x.cumsum(1) / steps

    def forward(self, idx):
        return self.features(idx) @ self.head.t()


class Peek(Causal):
    """Cheat: adds a boost to the next token's logit (what a non-causal model learns to do)."""

    def __init__(self, vocab, seq_len, boost=6.0, every=1, **kw):
        super().__init__(vocab, seq_len, **kw)
        self.boost, self.every = boost, every

    def forward(self, idx):
        logits = super().forward(idx)
        nxt = torch.roll(idx, -1, dims=1)
        hit = (nxt[..., None] == torch.arange(logits.size(-1), device=idx.device)).to(logits.dtype)
        where = (torch.arange(idx.size(1), device=idx.device) % self.every == self.every - 1)
        return logits + self.boost * hit * where[None, :, None].to(logits.dtype)


class Unused(torch.nn.Module):
    """Wraps a model: logits of the token ids the validation text never uses (`unused`, a bool
    mask) become `value` (-inf, NaN, +inf, a huge finite sentinel); `extra` more columns may be
    appended (ids beyond the vocabulary, set to `value` too) and the logits cast to `dtype`."""

    def __init__(self, inner, unused, value, extra=0, dtype=None):
        super().__init__()
        self.inner, self.value, self.extra, self.dtype = inner, value, extra, dtype
        self.register_buffer("unused", torch.cat([unused, torch.ones(extra, dtype=torch.bool)]), persistent=False)

    def forward(self, idx):
        logits = self.inner(idx)
        if self.extra:
            logits = torch.cat([logits, logits.new_zeros(*logits.shape[:2], self.extra)], -1)
        if self.dtype is not None:
            logits = logits.to(self.dtype)
        return logits.masked_fill(self.unused, self.value)


def record(model, seq_len, rows=ROWS):
    """(graph JSON, weights, constants) as runtime.save_model records them."""
    tokens = torch.randint(0, 2, (rows, seq_len))
    with torch.no_grad():
        spec, consts = runtime.record_graph(model.eval(), tokens)
    return json.dumps(spec), {k: v.detach().clone() for k, v in model.state_dict().items()}, consts


def load(model, seq_len, rows=ROWS):
    text, weights, consts = record(model, seq_len, rows)
    return G.load(text, weights, consts, rows=rows, seq_len=seq_len, device="cpu")


def run_checked(graph, seed=1):
    """The worker's evaluation in-process: (bpb, Checked) after finish(), or the IntegrityError."""
    import prepare
    steps = max(1, prepare.EVAL_TOKENS // (graph.rows * prepare.MAX_SEQ_LEN))
    checked = Checked(torch, graph, seed, steps)
    with torch.no_grad():
        bpb = prepare.evaluate_bpb(checked, prepare.Tokenizer.from_directory(), graph.rows)
        checked.finish()
    return bpb, checked


def unused_ids():
    """Bool mask [VOCAB_SIZE] of the token ids the tiny validation text never uses (input or target)."""
    import prepare
    tok = prepare.Tokenizer.from_directory()
    loader = prepare.make_dataloader(tok, ROWS, prepare.MAX_SEQ_LEN, "val", device="cpu")
    steps = max(1, prepare.EVAL_TOKENS // (ROWS * prepare.MAX_SEQ_LEN))
    seen = torch.zeros(prepare.VOCAB_SIZE, dtype=torch.bool)
    for _ in range(steps):
        x, y, _ = next(loader)
        seen[x.flatten()] = True
        seen[y.flatten()] = True
    return ~seen


def save_artifact(model, folder, name, source="# a train.py\n"):
    """runtime.save_model's artifact of `model` and the train.py source it claims."""
    import prepare
    path = folder / f"{name}.pt"
    sha = hashlib.sha256(source.encode()).hexdigest()
    runtime.save_model(model, path, {}, sha, prepare.VOCAB_SIZE, prepare.MAX_SEQ_LEN)
    return path


def verify_artifact(path, prepare_source, source="# a train.py\n"):
    return verify(path, Evaluation(source, prepare_source, eval_rows("tiny"), sealed=True))


def sha_of(t: torch.Tensor) -> str:
    """The test's own digest of a tensor's whole storage (independent of harness/graph.py's)."""
    raw = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def spec(nodes, output, rows=ROWS, seq_len=64):
    """A hand-made graph: nodes as (op, args, kwargs) in order, named n0, n1, ..."""
    return json.dumps({"format": G.GRAPH_FORMAT, "device": "cpu",
                       "input": {"shape": [rows, seq_len], "dtype": "int64"},
                       "nodes": [{"name": f"n{i}", "op": op, "args": args, "kwargs": kw}
                                 for i, (op, args, kw) in enumerate(nodes)],
                       "output": {"ref": output}})
