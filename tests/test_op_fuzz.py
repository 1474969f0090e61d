"""Kernels that cannot be driven out of bounds: the replay checks what each native kernel assumes
before calling it (harness/graph_calls.check_call), and every accepted operator survives the fuzzer.

- A seeded sample of scripts/fuzz_ops.py (every accepted overload in turn, adversarial shapes,
  strides, offsets, dtypes, indices and ints, operands in guarded memory, each call run twice
  with different canary bytes and against a reference on canonical copies, in worker
  subprocesses): zero failures.
- The attacks quoted against the CPU flash-attention kernel, and variants, replayed as graphs: the
  ones that crash or read outside their operands natively must be refused before the kernel is
  called (run in a subprocess, so a regression kills that process, not the test run); the legal
  neighbours (grouped-query heads that divide, an expanded batch, a stride-0 last dim, a huge
  size-1 stride) give the result the maths gives.
- The other preconditions, in-process: integer truncated division at INT_MIN / -1 (a SIGFPE),
  index ranges, matrix shapes, group norm's sizes, wrapped output sizes, load-time literal types.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))

from harness import graph as G  # noqa: E402
from harness import graph_calls, graph_ops  # noqa: E402

FLASH = "aten._scaled_dot_product_flash_attention_for_cpu.default"
SDPA = "aten.scaled_dot_product_attention.default"
B, H, L, E = 2, 4, 8, 16


def ref(name, index=None):
    return {"ref": name} if index is None else {"ref": name, "index": index}


def qkv(q=(B, H, L, E), k=(B, H, L, E), v=None):
    return {"q": q, "k": k, "v": v or k}


def attention(op=FLASH, q="c:q", k="c:k", v="c:v", views=(), **kwargs):
    """Nodes: `views` (op, args) made first (n0, n1...), then the attention call on q, k, v."""
    nodes = [(o, a, {}) for o, a in views]
    return nodes + [(op, [ref(q), ref(k), ref(v)], kwargs)]


# name -> (constants {key: shape}, nodes, expected): "refused: <words of the message>" or "correct"
NATIVE = {
    "value of batch 1 with a 2**40 batch stride (slice step on a size-1 dim)": (
        qkv(v=(1, H, L, E)), attention(v="n0", views=[("aten.slice.Tensor", [ref("c:v"), 0, 0, 1, 2 ** 40])]),
        "refused: batch sizes differ"),
    "key of batch 1 with a 2**40 batch stride": (
        qkv(k=(1, H, L, E), v=(B, H, L, E)), attention(k="n0", views=[("aten.slice.Tensor", [ref("c:k"), 0, 0, 1, 2 ** 40])]),
        "refused: batch sizes differ"),
    "key and value of batch 1, query of batch 2": (qkv(k=(1, H, L, E)), attention(), "refused: batch sizes differ"),
    "4 query heads over 3 kv heads": (qkv(k=(B, 3, L, E)), attention(), "refused: 4 query heads over 3"),
    "2 query heads over 4 kv heads": (qkv(q=(B, 2, L, E)), attention(), "refused: 2 query heads over 4"),
    "keys longer than values": (qkv(k=(B, H, 4 * L, E), v=(B, H, L, E)), attention(), "refused: key length 32 and value length 8"),
    "values longer than keys": (qkv(k=(B, H, L, E), v=(B, H, 4 * L, E)), attention(), "refused: key length 8 and value length 32"),
    "empty key and value sequence": (qkv(k=(B, H, 0, E)), attention(), "refused: empty attention"),
    "empty query sequence": (qkv(q=(B, H, 0, E)), attention(), "refused: empty attention"),
    "empty head width": (qkv(q=(B, H, L, 0), k=(B, H, L, 0)), attention(), "refused: empty attention"),
    "value wider than the query": (qkv(v=(B, H, L, E + 8)), attention(), "refused: head widths"),
    "3-D query": (qkv(q=(H, L, E)), attention(), "refused: query must be a tensor of 4"),
    "a mask wider than the keys": ({**qkv(), "m": (L, L + 5)}, attention(attn_mask=ref("c:m")), "refused: attention mask"),
    "a 3-D mask": ({**qkv(), "m": (H, L, L)}, attention(attn_mask=ref("c:m")), "refused: attention mask"),
    "is_causal with a mask": ({**qkv(), "m": (L, L)}, attention(attn_mask=ref("c:m"), is_causal=True),
                              "refused: is_causal and an explicit mask"),
    "sdpa: 4 query heads over 2 kv heads without enable_gqa": (qkv(k=(B, 2, L, E)), attention(SDPA), "refused: needs equal heads"),
    "sdpa: keys shorter than values (torch's own checks let it through)": (
        qkv(k=(B, H, 1, E), v=(B, H, 27, E)), attention(SDPA), "refused: key length 1 and value length 27"),
    "truncated int64 division of INT_MIN by -1 (SIGFPE)": (
        {"i": "int64_min"}, [("aten.div.Scalar_mode", [ref("c:i"), -1], {"rounding_mode": "trunc"})],
        "refused: division of -9223372036854775808 by -1"),
    "truncated int32 division of INT_MIN by a tensor of -1, in place on a clone": (
        {"i": "int32_min", "d": "int32_minus1"}, [("aten.clone.default", [ref("c:i")], {}),
                                                 ("aten.div_.Tensor_mode", [ref("n0"), ref("c:d")], {"rounding_mode": "trunc"})],
        "refused: division of -2147483648 by -1"),
    # the legal neighbours: same kernels, a result equal to the maths
    "4 query heads over 2 kv heads (grouped-query attention)": (qkv(k=(B, 2, L, E)), attention(), "correct"),
    "sdpa: 4 query heads over 2 kv heads with enable_gqa": (qkv(k=(B, 2, L, E)), attention(SDPA, enable_gqa=True), "correct"),
    "value batch expanded from 1 (stride 0)": (
        qkv(v=(1, H, L, E)), attention(v="n0", views=[("aten.expand.default", [ref("c:v"), [B, H, L, E]])]), "correct"),
    "value with a stride-0 last dim (expanded width)": (
        qkv(v=(B, H, L, 1)), attention(v="n0", views=[("aten.expand.default", [ref("c:v"), [B, H, L, E]])]), "correct"),
    "a single head with a 2**40 head stride": (
        qkv(q=(B, 1, L, E), k=(B, 1, L, E)), attention(q="n0", views=[("aten.slice.Tensor", [ref("c:q"), 1, 0, 1, 2 ** 40])]),
        "correct"),
    "query as [B, T, H, D] transposed (the recorded layout)": (
        qkv(q=(B, L, H, E)), attention(q="n0", views=[("aten.transpose.int", [ref("c:q"), 1, 2])]), "correct"),
    "an additive causal mask broadcast over batch and heads": ({**qkv(), "m": "causal"}, attention(attn_mask=ref("c:m")),
                                                               "correct"),
    "sdpa: a bool mask": ({**qkv(), "m": "causal_bool"}, attention(SDPA, attn_mask=ref("c:m")), "correct"),
    "native_group_norm told N = 0 for a non-empty input (it returns memory nobody wrote)": (
        {"x": (3, 2)}, [("aten.native_group_norm.default", [ref("c:x"), None, None, 0, 2, 1, 2, 1e-5], {})],
        "refused: N, C, HxW, group = 0, 2, 1, 2 do not describe the input (3, 2)"),
    "native_group_norm with a stride-0 weight": (
        {"x": (B, 4, 3), "w": (1,)}, [("aten.expand.default", [ref("c:w"), [4]], {}),
                                      ("aten.native_group_norm.default", [ref("c:x"), ref("n0"), None, B, 4, 3, 2, 1e-5], {})],
        "correct"),
    "truncated int64 division without INT_MIN / -1": (
        {"i": "int64_small"}, [("aten.div.Scalar_mode", [ref("c:i"), -1], {"rounding_mode": "trunc"})], "correct"),
}


def constant(key, what, gen):
    if what == "int64_min":
        return torch.tensor([-(2 ** 63), 7, -8], dtype=torch.int64)
    if what == "int32_min":
        return torch.tensor([[-(2 ** 31), 5], [3, -2]], dtype=torch.int32)
    if what == "int32_minus1":
        return torch.full((2,), -1, dtype=torch.int32)
    if what == "int64_small":
        return torch.tensor([-(2 ** 63) + 1, 7, -8], dtype=torch.int64)
    if what == "causal_bool":
        return torch.ones(L, L, dtype=torch.bool).tril()
    if what == "causal":
        return torch.zeros(L, L).masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    return torch.randn(*what, generator=gen)


def expected(consts, nodes, graph_args):
    """The result the maths gives, from the values the kernel was handed (logical, copied contiguous)."""
    op = nodes[-1][0]
    if "group_norm" in op:
        x, w = (t.clone(memory_format=torch.contiguous_format) for t in graph_args[:2])
        return torch.nn.functional.group_norm(x, graph_args[6], w, None, graph_args[7])
    if "attention" not in op:
        a, b = (t.clone(memory_format=torch.contiguous_format) if isinstance(t, torch.Tensor) else t for t in graph_args[:2])
        return torch.div(a, b, rounding_mode="trunc")
    q, k, v = (t.clone(memory_format=torch.contiguous_format).double() for t in graph_args[0][:3])
    mask = graph_args[1].get("attn_mask")
    k, v = k.repeat_interleave(q.shape[1] // k.shape[1], 1), v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


def run_case(name):
    """Replay one NATIVE case as the evaluator does: {"called": did the kernel run, "refused": the
    GraphError, "diff": max difference from the maths where it ran}."""
    consts_spec, nodes, _ = NATIVE[name]
    gen = torch.Generator().manual_seed(0)
    consts = {f"c:{k}": constant(k, w, gen) for k, w in consts_spec.items()}
    spec = {"format": G.GRAPH_FORMAT, "device": "cpu", "input": {"shape": [1, 1], "dtype": "int64"},
            "nodes": [{"name": f"n{i}", "op": o, "args": a, "kwargs": kw} for i, (o, a, kw) in enumerate(nodes)],
            "output": ref(f"n{len(nodes) - 1}", 0 if "_for_cpu" in nodes[-1][0] or "native" in nodes[-1][0] else None)}
    seen = {}
    real = graph_calls.check_call

    def check_call(node, op, args, kwargs):
        if node["name"] == f"n{len(nodes) - 1}":      # the values as graph.py made them, before the checks
            seen["args"] = (list(args), dict(kwargs))
        return real(node, op, args, kwargs)

    graph_calls.check_call = check_call
    try:
        g = G.load(json.dumps(spec), {}, consts, rows=1, seq_len=1, device="cpu")
        kernel = g.ops[-1]
        g.ops[-1] = Called(kernel, seen)
        with torch.no_grad():
            out = g(torch.zeros(1, 1, dtype=torch.long))
    except graph_ops.GraphError as e:
        return {"called": "called" in seen, "refused": str(e)}
    except (RuntimeError, ValueError, IndexError) as e:        # torch's own refusal, after the checks
        return {"called": "called" in seen, "refused": f"torch: {e}"}
    finally:
        graph_calls.check_call = real
    want = expected(consts, nodes, seen["args"][0] if "attention" not in nodes[-1][0] else seen["args"])
    return {"called": True, "refused": None, "diff": float((out.double() - want.double()).abs().max())}


class Called:
    def __init__(self, op, seen):
        self.op, self._schema, self.seen = op, op._schema, seen

    def __call__(self, *args, **kwargs):
        self.seen["called"] = True
        return self.op(*args, **kwargs)


@pytest.fixture(scope="module")
def native_outcomes():
    """Every NATIVE case, replayed in one subprocess (one line of JSON each, "S name" before it): a
    case that still reaches a native crash takes that process down, and shows as the case without
    a verdict."""
    proc = subprocess.run([sys.executable, __file__, "--native"], capture_output=True, text=True, cwd=REPO, timeout=300)
    outcomes, started = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("S "):
            started = line[2:]
        elif line.startswith("R "):
            v = json.loads(line[2:])
            outcomes[v.pop("name")] = v
    outcomes["_crashed"] = started if started not in outcomes else None
    outcomes["_stderr"] = proc.stderr[-2000:]
    return outcomes


@pytest.mark.parametrize("name", list(NATIVE))
def test_attacks_on_native_kernels_are_refused_before_the_call_and_neighbours_are_correct(native_outcomes, name):
    assert native_outcomes["_crashed"] is None, f"the replay crashed on {native_outcomes['_crashed']!r}: " \
                                                f"{native_outcomes['_stderr']}"
    got = native_outcomes[name]
    want = NATIVE[name][2]
    if want == "correct":
        assert got["refused"] is None and got["diff"] < 1e-5, got
    else:
        assert got["refused"] is not None and not got["called"], f"not refused before the kernel: {got}"
        assert want.split(": ", 1)[1] in got["refused"], got["refused"]
        assert got["refused"].startswith("node n"), got["refused"]        # names the node and the op


def fuzz(*args):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz_ops.py"), "--json", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    return proc, figures


def test_a_seeded_sample_of_the_fuzzer_has_no_failures():
    """Every accepted overload in turn (a different third of them each seed), plus the attention,
    product, index and sized families again: never a crash, a canary read or a wrong result."""
    proc, f = fuzz("--cases", "240", "--seed", "20261206")
    assert f["failures"] == 0 and proc.returncode == 0, proc.stdout[-4000:]
    assert f["cases"] == 240 and f["correct"] >= 100 and f["refused"] >= 30, f
    proc, f = fuzz("--cases", "120", "--seed", "7", "--ops",
                   "_scaled_dot_product_flash_attention_for_cpu,scaled_dot_product_attention,div,native_group_norm,"
                   "embedding,index,gather,scatter,mm,bmm,addmm,repeat,tile,constant_pad_nd")
    assert f["failures"] == 0 and proc.returncode == 0, proc.stdout[-4000:]
    assert f["correct"] >= 30 and f["refused"] >= 20, f


def test_the_fuzzer_catches_the_kernels_it_is_meant_to_catch(tmp_path):
    """The same sweep against a replay whose check_call does nothing reports the flash kernel's
    crashes and canary reads: the fuzzer can fail."""
    tree = tmp_path / "tree"
    (tree / "harness").mkdir(parents=True)
    (tree / "scripts").mkdir()
    for f in ("__init__.py", "graph.py", "graph_ops.py", "graph_calls.py"):
        (tree / "harness" / f).write_text((REPO / "harness" / f).read_text())
    with open(tree / "harness" / "graph_calls.py", "a") as f:
        f.write("\n\ndef check_call(node, op, args, kwargs):\n    return args, kwargs\n")
    for f in ("fuzz_ops.py", "fuzz_cases.py"):
        (tree / "scripts" / f).write_text((REPO / "scripts" / f).read_text())
    proc = subprocess.run([sys.executable, str(tree / "scripts" / "fuzz_ops.py"), "--json", "--cases", "40", "--seed", "1",
                           "--ops", "_scaled_dot_product_flash_attention_for_cpu"], capture_output=True, text=True, timeout=600)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 1 and figures["failures"] >= 2, proc.stdout[-3000:]
    assert "crash (exit -8)" in proc.stdout or "crash (exit -11)" in proc.stdout or "bytes around" in proc.stdout


def replay(nodes, consts, rows=1, seq=1):
    """Load and run a hand-made graph in-process; (output, whether the last node's kernel ran)."""
    spec = {"format": G.GRAPH_FORMAT, "device": "cpu", "input": {"shape": [rows, seq], "dtype": "int64"},
            "nodes": [{"name": f"n{i}", "op": o, "args": a, "kwargs": kw} for i, (o, a, kw) in enumerate(nodes)],
            "output": ref(f"n{len(nodes) - 1}", 0 if len(G.resolve(nodes[-1][0])._schema.returns) > 1 else None)}
    seen = {}
    g = G.load(json.dumps(spec), {}, consts, rows=rows, seq_len=seq, device="cpu")
    g.ops[-1] = Called(g.ops[-1], seen)
    try:
        return g(torch.zeros(rows, seq, dtype=torch.long)), True
    except graph_ops.GraphError:
        if "called" in seen:
            raise AssertionError("the kernel ran before the refusal")
        raise


# name -> (nodes, constants, words of the refusal): refused by check_call, before the kernel runs
PRECONDITIONS = {
    "an embedding index past the table": ([("aten.embedding.default", [ref("c:w"), ref("c:i")], {})],
                                          {"c:w": torch.randn(5, 3), "c:i": torch.tensor([0, 5])}, "indices in [0, 5], outside [0, 5)"),
    "a negative embedding index": ([("aten.embedding.default", [ref("c:w"), ref("c:i")], {})],
                                   {"c:w": torch.randn(5, 3), "c:i": torch.tensor([[-1, 2]])}, "outside [0, 5)"),
    "float indices": ([("aten.embedding.default", [ref("c:w"), ref("c:i")], {})],
                      {"c:w": torch.randn(5, 3), "c:i": torch.tensor([1.0])}, "indices must be a tensor of"),
    "a gather index past its dim": ([("aten.gather.default", [ref("c:x"), 1, ref("c:i")], {})],
                                    {"c:x": torch.randn(2, 3), "c:i": torch.tensor([[0, 3]])}, "outside [0, 3)"),
    "a scatter index past its dim, in place on a clone": (
        [("aten.clone.default", [ref("c:x")], {}), ("aten.scatter_.value", [ref("n0"), 0, ref("c:i"), 1.0], {})],
        {"c:x": torch.randn(2, 3), "c:i": torch.tensor([[2, 0, 1]])}, "outside [0, 2)"),
    "an index_select index past its dim": ([("aten.index_select.default", [ref("c:x"), 0, ref("c:i")], {})],
                                           {"c:x": torch.randn(2, 3), "c:i": torch.tensor([1, 9])}, "outside [0, 2)"),
    "an advanced index below -size": ([("aten.index.Tensor", [ref("c:x"), [None, ref("c:i")]], {})],
                                      {"c:x": torch.randn(2, 3), "c:i": torch.tensor([-4])}, "outside [-3, 3)"),
    "negative repeats from data": ([("aten.repeat_interleave.Tensor", [ref("c:r")], {})],
                                   {"c:r": torch.tensor([2, -1])}, "outside [0,"),
    "mm of 2x3 by 4x5": ([("aten.mm.default", [ref("c:a"), ref("c:b")], {})],
                         {"c:a": torch.randn(2, 3), "c:b": torch.randn(4, 5)}, "do not multiply"),
    "bmm with batches 2 and 1": ([("aten.bmm.default", [ref("c:a"), ref("c:b")], {})],
                                 {"c:a": torch.randn(2, 3, 4), "c:b": torch.randn(1, 4, 5)}, "do not multiply"),
    "addmm with a bias of the wrong size": ([("aten.addmm.default", [ref("c:c"), ref("c:a"), ref("c:b")], {})],
                                            {"c:c": torch.randn(3), "c:a": torch.randn(2, 3), "c:b": torch.randn(3, 5)},
                                            "does not broadcast"),
    "native_group_norm told N, C, HxW of another tensor": (
        [("aten.native_group_norm.default", [ref("c:x"), None, None, 200, 4, 3, 2, 1e-5], {})],
        {"c:x": torch.randn(2, 4, 3)}, "do not describe the input"),
    "group_norm with 3 groups of 4 channels": ([("aten.group_norm.default", [ref("c:x"), 3], {})],
                                               {"c:x": torch.randn(2, 4, 3)}, "do not divide"),
    "tile to 2**40 x 2**10 elements": ([("aten.tile.default", [ref("c:x"), [2 ** 40]], {})],
                                       {"c:x": torch.randn(2 ** 10)}, "elements (the limit is"),
    "padding to a negative size": ([("aten.constant_pad_nd.default", [ref("c:x"), [-3, -3]], {})],
                                   {"c:x": torch.randn(4)}, "leaves sizes [-2]"),
    "a CUDA attention bias of batch 1 (the kernel indexes it with the query's batch)": (
        [("aten._scaled_dot_product_efficient_attention.default", [ref("c:q"), ref("c:q"), ref("c:q"), ref("c:m"), False],
          {})], {"c:q": torch.randn(B, H, L, E), "c:m": torch.randn(1, H, L, L)}, "with a unit last stride"),
    "grouped-query heads on the CUDA efficient kernel": (
        [("aten._scaled_dot_product_efficient_attention.default", [ref("c:q"), ref("c:k"), ref("c:k"), None, False], {})],
        {"c:q": torch.randn(B, H, L, E), "c:k": torch.randn(B, 2, L, E)}, "this op needs equal heads"),
    "a size from data beyond 2**40": ([("aten.new_zeros.default", [ref("c:x"), [ref("c:n")]], {})],
                                      {"c:x": torch.randn(1), "c:n": torch.tensor(2 ** 41)}, "a size from data"),
}


@pytest.mark.parametrize("name", list(PRECONDITIONS))
def test_kernel_preconditions_are_refused_before_the_call(name):
    nodes, consts, words = PRECONDITIONS[name]
    with pytest.raises(graph_ops.PreconditionError, match=r"^node n\d+ \(aten\.") as e:
        replay(nodes, consts)
    assert words in str(e.value)


# name -> (node, words): refused at load, whatever the data
LOAD_REFUSED = {
    "a raw int where a dtype goes (an unchecked enum)": (("aten._to_copy.default", [ref("c:x")], {"dtype": 40}), "dtype"),
    "a sparse layout": (("aten._to_copy.default", [ref("c:x")], {"layout": {"layout": "sparse_coo"}}), "layout"),
    "a complex dtype": (("aten._to_copy.default", [ref("c:x")], {"dtype": {"dtype": "complex64"}}), "dtype"),
    "a view of float bytes as bool": (("aten.view.dtype", [ref("c:x"), {"dtype": "bool"}], {}), "views bytes as bool"),
    "an int beyond 2**40 (tile's product wraps)": (("aten.tile.default", [ref("c:x"), [2 ** 62 + 1]], {}), "argument dims"),
    "a TorchScript list overload": (("aten.mul.left_t", [[1, 2], 3], {}), "not a tensor operator"),
    "a prim conversion with a raw int dtype": (("aten.to.prim_dtype", [ref("c:x"), 1000], {}), "not a tensor operator"),
    "a reference where a float goes": (("aten.add.Scalar", [ref("c:x"), ref("c:x")], {}), "argument other"),
    "an argument the operator does not take": (("aten.abs.default", [ref("c:x")], {"bogus": 1}), "does not take"),
}


@pytest.mark.parametrize("name", list(LOAD_REFUSED))
def test_literals_a_kernel_would_trust_are_refused_at_load(name):
    node, words = LOAD_REFUSED[name]
    with pytest.raises(graph_ops.GraphError, match=words):
        replay([node], {"c:x": torch.randn(4)})


def test_the_recorded_slice_end_stays_accepted():
    """slice's open end is recorded as 2**63 - 1: exempt from the int bound (torch clamps it)."""
    out, _ = replay([("aten.slice.Tensor", [ref("c:x"), 0, 1, 2 ** 63 - 1], {}), ("aten.clone.default", [ref("n0")], {})],
                    {"c:x": torch.arange(4.0)})
    assert out.tolist() == [1.0, 2.0, 3.0]


def test_tame_resets_only_strides_beyond_the_storage_and_dense_copies_are_canonical():
    x = torch.randn(1, 3, 4)
    huge = torch.ops.aten.slice.Tensor(x, 0, 0, 1, 2 ** 40)
    assert huge.stride(0) == 12 * 2 ** 40 and graph_ops.within_storage(huge)
    assert huge.contiguous().stride(0) == 12 * 2 ** 40          # .contiguous() keeps it: not a canonical copy
    assert huge.clone(memory_format=torch.contiguous_format).stride() == (12, 4, 1)
    tamed = graph_calls.tame(huge)
    assert tamed.stride() == (12, 4, 1) and torch.equal(tamed, x) and tamed.untyped_storage()._cdata == x.untyped_storage()._cdata
    for honest in (x[..., -1:], x.transpose(0, 1), x[:, :1]):     # size-1 strides within the storage: kept
        assert graph_calls.tame(honest) is honest
    beyond = torch.ops.aten.slice.Tensor(x.transpose(0, 1), 1, 0, 1, 3)   # [3, 1, 4], stride 36 > 12 elements
    assert graph_calls.tame(beyond).stride() == (4, 4, 1) and torch.equal(graph_calls.tame(beyond), beyond)
    assert graph_calls.dense(torch.randn(2, 5, 3, 4).transpose(1, 2))              # the recorded q layout: no copy
    assert not graph_calls.dense(torch.randn(2, 3, 1).expand(2, 3, 4))             # stride-0 last dim: copied
    assert not graph_calls.dense(torch.randn(4, 6)[:, ::2])                        # gaps: copied
    assert not graph_ops.within_storage(torch.randn(2, dtype=torch.complex64))


def test_every_allowed_op_says_how_it_is_kept_in_bounds_and_checks_name_listed_ops():
    mechanisms = ("within_storage", "check_call", "check_node", "TensorIterator", "reads no data")
    for name, why in graph_ops.ALLOWED.items():
        assert any(m in why for m in mechanisms), (name, why)
    assert set(graph_calls._PRE) <= set(graph_ops.ALLOWED)
    assert graph_ops.ATTENTION_OPS <= set(graph_calls._PRE)
    assert {graph_ops.base_name(n) for n, _, _ in graph_ops.accepted_overloads()} == set(graph_ops.ALLOWED)


if __name__ == "__main__" and sys.argv[1:] == ["--native"]:
    for case in NATIVE:
        print(f"S {case}", flush=True)
        print("R " + json.dumps({"name": case, **run_case(case)}), flush=True)
