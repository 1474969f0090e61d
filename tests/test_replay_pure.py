"""The replay is a pure, memory-safe function: no call leaves state for the next, no view reads
outside its storage.

Hand-made graphs (the format graph_export.py records) try each way of keeping state that a graph has
been seen to try, or could: a buffer or weight written in place (directly, through a view or a
slice), the input written, an empty tensor's storage (data_ptr 0), sizes rewritten in place, a
size list taken from data. Views with raw sizes and strides try to read past their storage. A
randomized test then builds many small graphs from the allowed operators, with random arguments,
and checks with the test's own sha256 of every storage that nothing a call can reach changes,
that the same input gives the same bytes after other calls, and that nothing read lies outside
its storage.
"""
import json

import pytest
import torch

from harness import graph as G
from harness import graph_ops
from tests.replay_fixtures import sha_of, spec

ROWS, SEQ, V, D = 2, 4, 16, 4
IN = {"ref": "input"}


def ref(name, index=None):
    return {"ref": name} if index is None else {"ref": name, "index": index}


def pools():
    """Fresh weights and constants: distinct values, an empty tensor, a buffer."""
    weights = {"emb": torch.arange(V * D, dtype=torch.float32).reshape(V, D) / 7 + 1}
    consts = {"c:mem": torch.zeros(D), "c:empty": torch.empty(0), "c:big": torch.arange(24.0).reshape(6, 4) + 100}
    return weights, consts


def build(nodes, output=None):
    weights, consts = pools()
    text = spec([("aten.embedding.default", [ref("w:emb"), IN], {})] + nodes,
                output or f"n{len(nodes)}", rows=ROWS, seq_len=SEQ)
    return G.load(text, weights, consts, rows=ROWS, seq_len=SEQ, device="cpu"), weights, consts


def tokens(seed):
    return torch.randint(0, V, (ROWS, SEQ), generator=torch.Generator().manual_seed(seed))


# name -> nodes after n0 = embedding(w:emb, input) [2, 4, 4]; each would carry something from one call to the next
RUNTIME_REFUSED = {
    "a buffer added to in place": [("aten.sum.default", [ref("n0")], {}),
                                   ("aten.add_.Tensor", [ref("c:mem"), ref("n1")], {}),
                                   ("aten.add.Tensor", [ref("n0"), ref("c:mem")], {})],
    "a buffer written through its alias": [("aten.alias.default", [ref("c:mem")], {}),
                                           ("aten.mul_.Scalar", [ref("n1"), 2.0], {}),
                                           ("aten.add.Tensor", [ref("n0"), ref("n1")], {})],
    "a slice of a weight filled": [("aten.slice.Tensor", [ref("w:emb"), 0, 0, 1], {}),
                                   ("aten.fill_.Scalar", [ref("n1"), 0.0], {}),
                                   ("aten.add.Tensor", [ref("n0"), 1.0], {})],
    "an empty tensor's storage written (data_ptr 0)": [("aten.add_.Tensor", [ref("c:empty"), ref("c:empty")], {}),
                                                       ("aten.add.Tensor", [ref("n0"), 1.0], {})],
    "the input written": [("aten.add_.Scalar", [IN, 1], {}), ("aten.add.Tensor", [ref("n0"), 1.0], {})],
    "a view of the input written": [("aten.select.int", [IN, 0, 0], {}), ("aten.fill_.Scalar", [ref("n1"), 3], {}),
                                    ("aten.add.Tensor", [ref("n0"), 1.0], {})],
    "a masked fill into a constant's row": [("aten.select.int", [ref("c:big"), 0, 1], {}),
                                            ("aten.gt.Scalar", [ref("n1"), 0.0], {}),
                                            ("aten.masked_fill_.Scalar", [ref("n1"), ref("n2"), 0.0], {}),
                                            ("aten.add.Tensor", [ref("n0"), 1.0], {})],
}


@pytest.mark.parametrize("how", list(RUNTIME_REFUSED))
def test_writes_into_anything_the_call_did_not_allocate_are_refused(how):
    g, weights, consts = build(RUNTIME_REFUSED[how])
    before = {k: sha_of(t) for k, t in {**weights, **consts}.items()}
    with pytest.raises(G.GraphError, match="writes into the input, a weight or a constant"):
        g(tokens(0))
    assert {k: sha_of(t) for k, t in {**weights, **consts}.items()} == before


LOAD_REFUSED = {
    "an empty tensor's sizes grown in place": ([("aten.unsqueeze_.default", [ref("c:empty"), 0], {})],
                                               "changes a tensor's sizes in place"),
    "a weight transposed in place": ([("aten.transpose_.default", [ref("w:emb"), 0, 1], {})], "in place"),
    "a buffer squeezed in place": ([("aten.squeeze_.default", [ref("c:mem")], {})], "in place"),
    "as_strided_ on an empty constant": ([("aten.as_strided_.default", [ref("c:empty"), [4], [1], 0], {})],
                                         "not on the evaluator's list"),
    "set_ onto another storage": ([("aten.set_.source_Tensor", [ref("c:empty"), ref("c:big")], {})],
                                  "not on the evaluator's list"),
    "a resize": ([("aten.resize_.default", [ref("c:empty"), [8]], {})], "not on the evaluator's list"),
    "the attention's debug mask": ([("aten.unsqueeze.default", [ref("n0"), 1], {}),
                                    ("aten._scaled_dot_product_flash_attention.default",
                                     [ref("n1"), ref("n1"), ref("n1"), 0.0, True, True], {}),
                                    ("aten.clone.default", [ref("n2", 0)], {})], "debug mask"),
    "an attention kernel's log-sum-exp": ([("aten.unsqueeze.default", [ref("n0"), 1], {}),
                                           ("aten._scaled_dot_product_flash_attention_for_cpu.default",
                                            [ref("n1"), ref("n1"), ref("n1"), 0.0, True], {}),
                                           ("aten.clone.default", [ref("n2", 1)], {})], "auxiliary result"),
    "an attention kernel's results as a list": ([("aten.unsqueeze.default", [ref("n0"), 1], {}),
                                                 ("aten._scaled_dot_product_flash_attention_for_cpu.default",
                                                  [ref("n1"), ref("n1"), ref("n1"), 0.0, True], {}),
                                                 ("aten.cat.default", [ref("n2")], {})], "auxiliary result"),
    "an output size a kernel would trust": ([("aten.repeat_interleave.self_int", [ref("n0"), 2],
                                              {"dim": 0, "output_size": 2}),
                                             ("aten.clone.default", [ref("n1")], {})], "output size"),
    "copy_ into a buffer": ([("aten.copy_.default", [ref("c:mem"), ref("n0")], {})], "not on the evaluator's list"),
}


@pytest.mark.parametrize("how", list(LOAD_REFUSED))
def test_ops_that_rewrite_a_tensor_s_metadata_or_storage_are_refused_at_load(how):
    nodes, why = LOAD_REFUSED[how]
    with pytest.raises(G.GraphError, match=why):
        build(nodes + [("aten.add.Tensor", [ref("n0"), 1.0], {})])


def test_a_size_list_taken_from_data_does_not_carry_across_calls():
    """Sizes computed from this call's tokens (a list holding a 0-d tensor) are recomputed every call:
    the same input gives the same bytes whatever ran between."""
    g, weights, consts = build([("aten.sum.default", [IN], {}),                     # n1: 0-d, from data
                                ("aten.remainder.Scalar", [ref("n1"), 5], {}),        # n2
                                ("aten.add.Tensor", [ref("n2"), 1], {}),              # n3: 1..5
                                ("aten.new_ones.default", [ref("n0"), [ref("n3")]], {}),
                                ("aten.sum.default", [ref("n4")], {}),                # n5: the size, as a value
                                ("aten.add.Tensor", [ref("n0"), ref("n5")], {})])
    a = g(tokens(0))
    for seed in range(1, 6):
        g(tokens(seed))
    assert torch.equal(g(tokens(0)), a)
    before = g.digest()
    g(tokens(9))
    assert g.digest() == before


def test_a_write_the_static_rule_missed_is_caught_by_the_seal():
    """Whatever changes a weight's or constant's bytes, sizes or storage between calls (here the
    test itself, standing in for any write path a rule misses), the next call refuses."""
    for change, why in [(lambda w, c: w["emb"][3, 1].add_(1), "bytes of w:emb"),
                        (lambda w, c: c["c:big"].view(-1)[23].fill_(0), "bytes of c:big"),
                        (lambda w, c: c["c:mem"].unsqueeze_(0), "sizes"),
                        (lambda w, c: c["c:empty"].resize_(4), "sizes")]:
        g, weights, consts = build([("aten.add.Tensor", [ref("n0"), ref("c:mem")], {}),
                                    ("aten.sum.default", [ref("c:empty")], {}),
                                    ("aten.sum.default", [ref("c:big")], {}),
                                    ("aten.add.Tensor", [ref("n1"), ref("n2")], {}),
                                    ("aten.add.Tensor", [ref("n4"), ref("n3")], {})])
        g(tokens(0))
        change(weights, consts)
        with pytest.raises(G.GraphError, match=why):
            g(tokens(0))


OUTSIDE = {
    "_reshape_alias past the end": ("aten._reshape_alias.default", [ref("c:big"), [100], [1]]),
    "as_strided with a negative stride": ("aten.as_strided.default", [ref("c:big"), [4], [-1], 3]),
    "as_strided_copy past the end": ("aten.as_strided_copy.default", [ref("c:big"), [64], [1]]),
    "as_strided at an offset": ("aten.as_strided.default", [ref("c:big"), [4], [1], 1000]),
}


@pytest.mark.parametrize("how", list(OUTSIDE))
def test_raw_stride_views_are_not_on_the_list(how):
    op, args = OUTSIDE[how]
    with pytest.raises(G.GraphError, match="not on the evaluator's list"):
        build([(op, args, {}), ("aten.clone.default", [ref("n1")], {})])


def test_a_view_outside_its_storage_is_refused_even_if_its_op_were_listed(monkeypatch):
    """The second line: every tensor a node returns is checked against its storage."""
    monkeypatch.setitem(graph_ops.ALLOWED, "_reshape_alias", "only for this test")
    g, _, _ = build([("aten._reshape_alias.default", [ref("c:big"), [100], [1]], {}),
                     ("aten.clone.default", [ref("n1")], {})])
    with pytest.raises(G.GraphError, match="outside its storage"):
        g(tokens(0))


def test_within_storage_by_hand():
    a = torch.arange(10.0)
    assert graph_ops.within_storage(a) and graph_ops.within_storage(a[8:]) and graph_ops.within_storage(a[:0])
    assert graph_ops.within_storage(a[:1].expand(100)) and graph_ops.within_storage(a.view(2, 5).t())
    assert not graph_ops.within_storage(torch.ops.aten._reshape_alias.default(a, [100], [1]))
    assert not graph_ops.within_storage(torch.ops.aten._reshape_alias.default(a[8:], [3], [1]))


def test_every_listed_op_has_a_reason_and_none_is_a_raw_view():
    assert all(isinstance(why, str) and len(why) > 10 for why in graph_ops.ALLOWED.values())
    for name in ("as_strided", "as_strided_copy", "_reshape_alias", "set", "resize", "empty", "empty_like",
                 "copy", "index_put", "_unsafe_index", "rand", "bernoulli"):
        assert name not in graph_ops.ALLOWED
    assert json.dumps(sorted(graph_ops.ALLOWED))   # plain names
