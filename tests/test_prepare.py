"""prepare.py at run time: profiles, packing, resumable loader, the bpb metric, tokenizers.

Uses the session's `tiny` cache (tests/conftest.py). CLI, data sources and the hub are in
test_prepare_sources.py.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def prep(tiny_cache):
    import prepare
    assert prepare.PROFILE == "tiny" and str(prepare.CACHE_DIR) == tiny_cache["AUTORESEARCH_CACHE"]
    return prepare


def _full_rows(x, y):
    """The packed rows of T+1 tokens that x and y were cut from."""
    return torch.cat([x, y[:, -1:]], dim=1)


def _split_docs(prep, tok, split):
    texts = [t for p in prep.list_shards(split) for t in pq.read_table(p)["text"].to_pylist()]
    return [tuple(d) for d in tok.encode(texts, prepend=tok.get_bos_token_id())]


def test_profiles_env_overrides_and_no_data_in_a_fresh_process(tmp_path):
    code = """
import importlib, json, os, prepare
out = {}
for name in ["gpu", "cpu", "tiny"]:
    os.environ["AUTORESEARCH_PROFILE"] = name
    importlib.reload(prepare)
    out[name] = [prepare.MAX_SEQ_LEN, prepare.EVAL_TOKENS, prepare.VOCAB_SIZE, prepare.TIME_BUDGET,
                 str(prepare.CACHE_DIR), prepare.describe()]
try:
    prepare.Tokenizer.from_directory()
except prepare.PrepareError as e:
    out["no_data"] = str(e)
os.environ["AUTORESEARCH_PROFILE"] = "h100"
try:
    importlib.reload(prepare)
except ValueError as e:
    out["bad"] = str(e)
print(json.dumps(out))
"""
    env = {**os.environ, "AUTORESEARCH_TIME_BUDGET": "7.5", "AUTORESEARCH_CACHE": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["gpu"][:3] == [2048, 40 * 524288, 8192]
    assert out["cpu"][:3] == [256, 131072, 4096]
    assert out["tiny"][:3] == [64, 8192, 512]
    for name in ["gpu", "cpu", "tiny"]:
        assert out[name][3] == 7.5 and out[name][4] == str(tmp_path)
        d = out[name][5]
        assert set(d) == {"profile", "time_budget", "max_seq_len", "eval_tokens", "vocab_size", "source", "fingerprint",
                          "paths"}
        assert d["profile"] == name and d["fingerprint"] is None and d["source"] is None
        # where the sandbox shows or hides data (harness/sandbox.py): all under this profile's cache
        assert set(d["paths"]) == {"cache", "data", "val", "tokenizer", "pointer", "hide"}
        assert all(v.startswith(str(tmp_path)) for k, v in d["paths"].items() if k != "hide")
        assert d["paths"]["hide"] == []              # not prepared: no validation source to hide
        assert d["paths"]["pointer"].endswith(f"prepared-{name}.json")
    assert "h100" in out["bad"] and "gpu, cpu, tiny" in out["bad"]
    assert "`uv run prepare.py`" in out["no_data"]  # what a fresh train.py process would say


def test_rows_start_with_bos_have_no_padding_and_y_is_x_shifted(prep):
    tok = prep.Tokenizer.from_directory()
    bos, V = tok.get_bos_token_id(), tok.get_vocab_size()
    loader = prep.make_dataloader(tok, 4, 64, "train", device="cpu")
    for _ in range(25):
        x, y, epoch = next(loader)
        assert x.shape == y.shape == (4, 64) and x.dtype == y.dtype == torch.int64
        assert (x[:, 0] == bos).all()
        assert torch.equal(y[:, :-1], x[:, 1:])
        assert ((x >= 0) & (x < V)).all() and ((y >= 0) & (y < V)).all()
        assert epoch == 1


def test_rows_are_whole_documents_then_one_cropped_document(prep):
    tok = prep.Tokenizer.from_directory()
    bos = tok.get_bos_token_id()
    docs = _split_docs(prep, tok, "train")
    whole = set(docs)
    loader = prep.make_dataloader(tok, 8, 64, "train", device="cpu")
    for _ in range(10):
        for row in _full_rows(*next(loader)[:2]).tolist():
            starts = [i for i, t in enumerate(row) if t == bos]
            segments = [tuple(row[a:b]) for a, b in zip(starts, starts[1:] + [len(row)])]
            assert starts[0] == 0
            assert all(s in whole for s in segments[:-1])  # best fit places whole documents...
            last = segments[-1]                            # ...and crops only the one that fills the row
            assert any(d[:len(last)] == last for d in docs)


def test_loader_is_deterministic_and_resumes_exactly(prep, tmp_path):
    tok = prep.Tokenizer.from_directory()
    a = prep.make_dataloader(tok, 4, 64, "train", device="cpu")
    first = [next(a)[0] for _ in range(6)]
    torch.save(a.state_dict(), tmp_path / "loader.pt")
    after = [next(a) for _ in range(8)]
    again = prep.make_dataloader(tok, 4, 64, "train", device="cpu")
    assert all(torch.equal(p, next(again)[0]) for p in first)
    resumed = prep.make_dataloader(tok, 4, 64, "train", device="cpu", state=torch.load(tmp_path / "loader.pt"))
    for x, y, epoch in after:
        rx, ry, repoch = next(resumed)
        assert torch.equal(x, rx) and torch.equal(y, ry) and epoch == repoch


def test_loader_resumes_across_an_epoch_boundary(prep):
    tok = prep.Tokenizer.from_directory()
    a = prep.make_dataloader(tok, 16, 64, "val", device="cpu")
    epochs = []
    while not epochs or epochs[-1] == 1:  # the val split is small: an epoch is a few dozen batches
        epochs.append(next(a)[2])
        assert len(epochs) < 500
    state = a.state_dict()
    expect = [next(a) for _ in range(5)]
    b = prep.make_dataloader(tok, 16, 64, "val", device="cpu", state=state)
    assert all(torch.equal(e[0], next(b)[0]) for e in expect)
    assert expect[-1][2] == 2
    with pytest.raises(ValueError, match="split"):
        prep.make_dataloader(tok, 16, 64, "train", state=state)


class UniformModel(torch.nn.Module):
    """Zero logits: every token costs ln(V) nats. Records how it was called."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.calls = vocab, []
        self.bias = torch.nn.Parameter(torch.zeros(vocab))

    def forward(self, idx):  # no targets parameter: evaluate_bpb must not pass any
        self.calls.append((tuple(idx.shape), torch.is_grad_enabled(), self.training))
        return torch.zeros(*idx.shape, self.vocab) + self.bias


class PeekModel(UniformModel):
    """Puts (almost) all mass on the next input token: only the last position of a row is a guess."""

    def forward(self, idx):
        logits = super().forward(idx).clone()
        logits[:, :-1].scatter_(2, idx[:, 1:, None], 100.0)
        return logits


def _expected_bpb(prep, tok, batch_size, last_only=False):
    """log2(V) * counted targets / their bytes, from the loader and the tokenizer (not token_bytes.pt)."""
    specials = {tok.enc.encode_single_token(s) for s in prep.SPECIAL_TOKENS}
    loader = prep.make_dataloader(tok, batch_size, prep.MAX_SEQ_LEN, "val", device="cpu")
    counted = nbytes = 0
    for _ in range(max(1, prep.EVAL_TOKENS // (batch_size * prep.MAX_SEQ_LEN))):
        y = next(loader)[1]
        for row in y.tolist():
            for t, target in enumerate(row):
                if target not in specials:
                    nbytes += len(tok.enc.decode_single_token_bytes(target))
                    counted += (not last_only) or t == len(row) - 1
    return math.log2(tok.get_vocab_size()) * counted / nbytes


def test_evaluate_bpb_of_uniform_logits_is_log2_vocab_per_token(prep):
    tok = prep.Tokenizer.from_directory()
    model = UniformModel(tok.get_vocab_size())
    model.train()
    bpb = prep.evaluate_bpb(model, tok, 8)
    assert math.isclose(bpb, _expected_bpb(prep, tok, 8), rel_tol=1e-6)
    steps = prep.EVAL_TOKENS // (8 * prep.MAX_SEQ_LEN)
    assert model.calls == [((8, prep.MAX_SEQ_LEN), False, False)] * steps
    assert model.training  # restored
    huge = UniformModel(tok.get_vocab_size())
    with pytest.warns(prep.DataWarning, match="repeats documents"):  # 64K tokens > the tiny val split
        prep.evaluate_bpb(huge, tok, 1000)
    assert len(huge.calls) == 1  # at least one step


def test_evaluate_bpb_aligns_targets_with_inputs(prep):
    tok = prep.Tokenizer.from_directory()
    bpb = prep.evaluate_bpb(PeekModel(tok.get_vocab_size()), tok, 8)
    assert math.isclose(bpb, _expected_bpb(prep, tok, 8, last_only=True), rel_tol=1e-5)
    assert bpb < 0.2 * prep.evaluate_bpb(UniformModel(tok.get_vocab_size()), tok, 8)


def test_evaluate_bpb_rejects_wrong_logit_shapes(prep):
    tok = prep.Tokenizer.from_directory()
    with pytest.raises(ValueError, match="logits"):
        prep.evaluate_bpb(UniformModel(tok.get_vocab_size() - 1), tok, 8)


TEXTS = ["Hello world! Numbers: 123456. Unicode: 你好, naïve café, emoji 🚀.",
         "def f(x):\n\treturn x ** 2  # tabs and\r\n line endings\n\n", "", " ", "<|reserved_0|> is plain text here"]


def test_bpe_tokenizer_round_trip_and_token_bytes(prep):
    tok = prep.Tokenizer.from_directory()
    assert tok.kind == "bpe" and tok.get_vocab_size() == prep.VOCAB_SIZE == 512
    token_bytes = prep.get_token_bytes()
    assert token_bytes.dtype == torch.long and token_bytes.shape == (512,)
    bos = tok.get_bos_token_id()
    assert token_bytes[bos] == 0 and (token_bytes[-len(prep.SPECIAL_TOKENS):] == 0).all()
    for text, ids in zip(TEXTS, tok.encode(TEXTS, prepend=bos)):
        assert ids[0] == bos and bos not in ids[1:]
        assert tok.decode(ids[1:]) == text == tok.decode(tok.encode(text))
        assert int(token_bytes[ids].sum()) == len(text.encode("utf-8"))
    with pytest.raises(TypeError):
        tok.encode("x", prepend="<|reserved_0|>")


def test_byte_tokenizer_round_trip(prep, tmp_path):
    prep._train_tokenizer(None, tmp_path, "byte")
    tok = prep.Tokenizer.from_directory(tmp_path)
    assert tok.kind == "byte" and tok.get_vocab_size() == 260 and tok.get_bos_token_id() == 256
    token_bytes = torch.load(tmp_path / "token_bytes.pt")
    assert token_bytes.tolist() == [1] * 256 + [0] * 4
    for text, ids in zip(TEXTS, tok.encode(TEXTS, prepend=256)):
        assert ids == [256] + list(text.encode("utf-8"))
        assert tok.decode(ids[1:]) == text
    assert tok.decode([256, 104, 105]) == "<|reserved_0|>hi"
    assert tok.digest() != prep.Tokenizer.from_directory().digest()


def test_fingerprint_is_stored_and_described(prep, tiny_cache):
    fp = prep.data_fingerprint()
    assert re.fullmatch(r"[0-9a-f]{12}", fp)
    stored = json.loads((prep.TOKENIZER_DIR / "fingerprint.json").read_text())
    assert stored["fingerprint"] == fp and stored["stats"]["val_docs"] > 0
    d = prep.describe()
    paths = d.pop("paths")
    assert d == {"profile": "tiny", "time_budget": prep.TIME_BUDGET, "max_seq_len": 64, "eval_tokens": 8192,
                 "vocab_size": 512, "source": prep.SOURCE, "fingerprint": fp}
    assert Path(paths["val"]) == (prep.DATA_DIR / prep.VAL_FILENAME).resolve() and Path(paths["val"]).is_file()
    assert Path(paths["tokenizer"]) == prep.TOKENIZER_DIR.resolve()
    assert prep.SOURCE.startswith("local:")
    pointer = json.loads((Path(tiny_cache["AUTORESEARCH_CACHE"]) / "prepared-tiny.json").read_text())
    assert pointer["fingerprint"] == fp


def test_no_data_anywhere_names_the_command(prep, tmp_path, monkeypatch):
    monkeypatch.setattr(prep, "DATA_DIR", tmp_path / "nothing" / "data")
    monkeypatch.setattr(prep, "TOKENIZER_DIR", tmp_path / "nothing" / "tokenizer")
    for call in [prep.Tokenizer.from_directory, prep.data_fingerprint, prep.get_token_bytes,
                 lambda: prep.make_dataloader(prep.Tokenizer(None), 2, 8, "train")]:
        with pytest.raises(prep.PrepareError, match="`uv run prepare.py`"):
            call()
    assert prep.describe()["fingerprint"] is None


@pytest.fixture
def data_copy(prep, tmp_path, monkeypatch):
    """A private copy of the tiny data, for tests that damage it."""
    copy = tmp_path / "data"
    shutil.copytree(prep.DATA_DIR, copy)
    monkeypatch.setattr(prep, "DATA_DIR", copy)
    return copy


def test_corrupt_train_shard_is_skipped_with_a_warning(prep, data_copy):
    good = (data_copy / "shard_00000.parquet").read_bytes()
    (data_copy / "shard_00001.parquet").write_bytes(good)
    (data_copy / "shard_00000.parquet").write_bytes(good[: len(good) // 2])  # a partial download
    tok = prep.Tokenizer.from_directory()
    loader = prep.make_dataloader(tok, 4, 64, "train", device="cpu")
    with pytest.warns(prep.DataWarning, match="skipping unreadable shard .*shard_00000.parquet"):
        x, y, _ = next(loader)
    assert (x[:, 0] == tok.get_bos_token_id()).all() and torch.equal(y[:, :-1], x[:, 1:])


def test_all_train_shards_corrupt_raises_instead_of_hanging(prep, data_copy):
    (data_copy / "shard_00000.parquet").write_bytes(b"PAR1 not really")
    loader = prep.make_dataloader(prep.Tokenizer.from_directory(), 4, 64, "train", device="cpu")
    with pytest.warns(prep.DataWarning), pytest.raises(prep.PrepareError, match="uv run prepare.py"):
        next(loader)


def test_corrupt_validation_shard_is_an_error(prep, data_copy):
    (data_copy / prep.VAL_FILENAME).write_bytes(b"garbage")
    tok = prep.Tokenizer.from_directory()
    with pytest.raises(prep.PrepareError, match="validation shard .* `uv run prepare.py`"):
        prep.evaluate_bpb(UniformModel(tok.get_vocab_size()), tok, 8)
