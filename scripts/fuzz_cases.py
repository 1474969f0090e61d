"""Cases for scripts/fuzz_ops.py: one call of one accepted overload with adversarial arguments.

A Case holds the graph's nodes (the view nodes that make operands, then the target call) and the
operands' specs (shape, strides, offset, storage size, dtype, a seed for their values); the fuzzer
materialises the specs in guarded memory, twice. plan() gives shape-coherent arguments for the
operator families whose kernels trust relations between operands (attention, products, norms,
convolution, index reads, einsum, concatenation, views, sized outputs), mostly valid, then broken one
way at a time (a size off, an empty dimension, an index out of range, a huge int); other arguments
follow generic rules by schema type and name.
"""
from __future__ import annotations

import random

from harness import graph_ops

# Ints where sizes, steps and indices go: past int32, at and past the evaluator's 2**40 bound, near
# and at int64's ends (products of them wrap).
HUGE = [2 ** 31, 2 ** 40, 2 ** 40 + 1, 2 ** 62, 2 ** 63 - 1, -(2 ** 63), -(2 ** 40)]
# Strides a size-1 dimension may carry (it addresses only index 0, so they stay inside the storage).
STRIDE_1 = [2 ** 20, 2 ** 40, 2 ** 61 + 3, 2 ** 63 - 1]
# dtypes of operands, float32 most often (the models' own), every accepted dtype sometimes.
DTYPE_NAMES = ["float32"] * 6 + ["float64", "bfloat16", "float16", "int64", "int64", "int32", "int16", "int8",
                                  "uint8", "bool"]
FLOAT_NAMES = ["float32"] * 5 + ["float64", "bfloat16", "float16"]
# Scalar arguments: ordinary ones, the division edges (0, -1), non-finite and huge ones.
SCALARS = [0, 1, -1, 2, 3, 0.5, -2.5, 7.25, 1e30, {"float": "inf"}, {"float": "-inf"}, {"float": "nan"}, 2 ** 62,
           -(2 ** 63), -(2 ** 31)]
# String arguments by name: the valid values and one that is not.
STRINGS = {"rounding_mode": ["trunc", "floor", "trunc", "nope"], "approximate": ["none", "tanh", "x"],
           "reduce": ["add", "multiply", "sum", "x"], "mode": ["constant", "constant", "reflect", "replicate", "circular", "x"]}


class Case:
    """One call: the graph's nodes, its operands (specs, materialised per run) and the target node."""

    def __init__(self, rng: random.Random, name: str, overload: str, op):
        self.rng, self.name, self.overload, self.op = rng, name, overload, op
        self.base = graph_ops.base_name(name)
        self.specs: dict[str, dict] = {}
        self.nodes: list[tuple] = []
        self.shapes: dict[str, list] = {}      # reference -> the shape it was made with
        self.tame = False                      # finite data of moderate size (sums compared closely)
        self.at_end = rng.random() < 0.5

    # operands
    def tensor(self, shape, dtype=None, index=None, bad=0.0, chain=None, heavy=False):
        """A reference to an operand of `shape`, made as a constant with a random layout or by view
        nodes from one (`chain`: given ones, on a base of the same shape). `index`: values in
        [lo, hi), a fraction `bad` of them outside; `heavy`: integer extremes and -1 half the time."""
        r = self.rng
        shape = [int(n) for n in shape]
        dtype = dtype or self.dtype
        if chain is not None:
            base_shape = list(shape)
        else:
            chain, base_shape = self._chain(list(shape)) if r.random() < 0.3 else ([], list(shape))
        strides, offset, numel = self._layout(base_shape)
        key = f"c:{len(self.specs)}"
        self.specs[key] = {"shape": base_shape, "strides": strides, "offset": offset, "numel": numel, "dtype": dtype,
                           "seed": r.randrange(2 ** 31), "index": index, "bad": bad, "tame": self.tame,
                           "heavy": heavy}
        cur = {"ref": key}
        for op, args in chain:
            cur = self.node(op, [cur] + args, {})
        self.shapes[cur["ref"]] = shape
        return cur

    def refresh(self, ref):
        """An in-place target: a clone the graph makes of ref (an in-place op may write only into
        storage its call allocated), sometimes seen through a transpose or a size-1 slice step."""
        shape = self.shapes.get(ref["ref"], [])
        cur = self.node("aten.clone.default", [ref], {})
        if len(shape) >= 2 and self.rng.random() < 0.3:
            cur = self.node("aten.transpose.int", [cur, 0, -1], {})
        elif 1 in shape and self.rng.random() < 0.3:
            cur = self.node("aten.slice.Tensor", [cur, shape.index(1), 0, 1, 2 ** 40], {})
        return cur

    def node(self, op, args, kwargs):
        self.nodes.append((op, args, kwargs))
        return {"ref": f"n{len(self.nodes) - 1}"}

    def _layout(self, shape):
        r = self.rng
        kind = r.choice(["contig", "contig", "offset", "permuted", "gapped", "expanded", "huge1", "mixed"])
        order = list(range(len(shape)))
        if kind in ("permuted", "mixed"):
            r.shuffle(order)
        strides, acc = [0] * len(shape), 1
        for d in reversed(order):
            strides[d] = acc * (r.choice([1, 2, 3]) if kind in ("gapped", "mixed") else 1)
            acc = strides[d] * max(shape[d], 1)
        for d, n in enumerate(shape):
            if kind in ("expanded", "mixed") and r.random() < 0.4:
                strides[d] = 0
            if n == 1 and kind in ("huge1", "mixed"):
                strides[d] = r.choice(STRIDE_1)
        offset = r.randint(0, 9) if kind in ("offset", "gapped", "mixed") else 0
        span = sum((n - 1) * s for n, s in zip(shape, strides) if n > 1) if 0 not in shape else -1
        return strides, offset, offset + span + 1 + r.choice([0, 0, 1, 7])

    def _chain(self, shape):
        """View nodes that turn a base of another shape into `shape`: [(op, args)], base shape."""
        r, chain = self.rng, []
        for _ in range(r.randint(1, 2)):
            d = r.randrange(len(shape)) if shape else None
            kind = r.choice(["step1", "expand", "transpose", "select", "narrow", "step", "unsqueeze"])
            if d is None:
                kind = "select"
                shape, d = [r.randint(1, 3)], 0
                chain.insert(0, ("aten.select.int", [0, r.randrange(shape[0])]))
                continue
            if kind == "step1" and shape[d] == 1:      # the quoted attack: a huge step on a size-1 dim
                chain.insert(0, ("aten.slice.Tensor", [d, 0, 1, r.choice([2 ** 40, 2 ** 30, 7])]))
            elif kind == "expand" and shape[d] != 1:
                chain.insert(0, ("aten.expand.default", [list(shape)]))
                shape = shape[:d] + [1] + shape[d + 1:]
            elif kind == "transpose" and len(shape) > 1:
                e = r.randrange(len(shape))
                chain.insert(0, ("aten.transpose.int", [d, e]))
                shape[d], shape[e] = shape[e], shape[d]
            elif kind == "select":
                n = r.randint(1, 3)
                chain.insert(0, ("aten.select.int", [d, r.randrange(-n, n)]))
                shape = shape[:d] + [n] + shape[d:]
            elif kind == "narrow":
                extra = r.randint(1, 4)
                start = r.randint(0, extra)
                chain.insert(0, ("aten.narrow.default", [d, start, shape[d]]))
                shape = shape[:d] + [shape[d] + extra] + shape[d + 1:]
            elif kind == "step" and shape[d] > 0:
                step = r.choice([2, 3])
                chain.insert(0, ("aten.slice.Tensor", [d, 0, shape[d] * step, step]))
                shape = shape[:d] + [shape[d] * step - r.randrange(step)] + shape[d + 1:]
            elif kind == "unsqueeze" and shape[d] == 1:
                chain.insert(0, ("aten.unsqueeze.default", [d]))
                shape = shape[:d] + shape[d + 1:]
        return chain, shape

    # literals
    def dims(self, rank):
        r = self.rng
        return r.randint(-rank - 1, rank) if r.random() < 0.1 else r.randint(-max(rank, 1), max(rank, 1) - 1)

    def small(self, lo=-2, hi=6):
        r = self.rng
        return r.choice(HUGE) if r.random() < 0.05 else r.randint(lo, hi)

    def shape(self, rank=None):
        r = self.rng
        rank = r.choice([0, 1, 2, 2, 3, 3, 4]) if rank is None else rank
        return [r.choice([0, 1, 1, 2, 3, 4, 5]) if r.random() < 0.85 else r.randint(6, 9) for _ in range(rank)]

    def variant(self, shape):
        """Another operand's shape: the same (mostly), broadcastable, or mismatched."""
        r = self.rng
        x = r.random()
        if x < 0.6:
            return list(shape)
        if x < 0.85:
            out = shape[r.randint(0, len(shape)):] if shape else []
            return [1 if r.random() < 0.4 else n for n in out]
        return self.shape(len(shape) if r.random() < 0.5 else None)


def build(case: Case) -> Case:
    """The case's target node from the operator's schema: the family's arguments, then generic ones."""
    r = case.rng
    case.dtype = r.choice(DTYPE_NAMES)
    case.main = case.shape()
    case.tame = case.base in ACCUMULATING and r.random() < 0.8
    planned = FAMILIES.get(case.base, lambda c: {})(case)
    args, kwargs, named = [], {}, False
    for a in case.op._schema.arguments:
        if a.name in planned:
            v = coerce(case, planned[a.name], str(a.real_type))
        elif a.has_default_value() and r.random() < 0.5:
            named = True                     # left at its default: later ones by name
            continue
        else:
            v = generic(case, a.name, str(a.real_type))
        if a.kwarg_only or named:
            kwargs[a.name] = v
        else:
            args.append(v)
    if case.name != case.base and args and isinstance(args[0], dict) and "ref" in args[0]:
        args[0] = case.refresh(args[0])      # an in-place op writes only into what the call made
    case.target = len(case.nodes)
    case.node(f"aten.{case.name}.{case.overload}", args, kwargs)
    return case


def coerce(case: Case, v, t: str):
    """A planned value in the schema's form (a family plans by name: `dim` is an int in one
    overload and a list in another, `start` a number or a 0-dim tensor)."""
    t = t[9:-1] if t.startswith("Optional[") else t
    if t == "List[int]" and isinstance(v, int) and case.rng.random() < 0.9:
        return [v]
    if t == "int" and isinstance(v, list):
        return v[0] if v else 0
    if t == "Tensor" and (isinstance(v, (int, float)) or (isinstance(v, dict) and "float" in v)):
        return case.tensor([], case.rng.choice(["float32", "int64", case.dtype]))
    return v


def generic(case: Case, name: str, t: str):
    r = case.rng
    optional = t.startswith("Optional[")
    t = t[9:-1] if optional else t
    if optional and r.random() < 0.25:
        return None
    rank = len(case.main)
    if t == "Tensor":
        if name in ("mask", "condition"):
            return case.tensor(case.variant(case.main), "bool")
        return case.tensor(case.main if name in ("self", "input", "a") else case.variant(case.main))
    if t.startswith("List[") and "Tensor" in t:
        return [case.tensor(case.variant(case.main)) for _ in range(r.randint(1, 3))]
    if t == "int":
        return case.dims(rank) if "dim" in name else case.small()
    if t == "List[int]":
        if "dim" in name:
            return r.sample(range(-rank, rank), r.randint(0, rank)) if rank else []
        return [case.small(0, 5) for _ in range(r.randint(0, 4))]
    if t == "float":
        return r.choice([1e-5, 1e-5, 0.5, 2.0, -1.0, 0.0, 1e308, {"float": "inf"}, {"float": "nan"}])
    if t == "number":
        return r.choice(SCALARS)
    if t == "bool":
        return r.random() < 0.5
    if t == "str":
        return r.choice(STRINGS.get(name, ["none", "x"]))
    if t == "ScalarType":
        return {"dtype": r.choice(DTYPE_NAMES + ["complex64"])}
    if t == "Layout":
        return {"layout": "strided" if r.random() < 0.9 else "sparse_coo"}
    if t == "MemoryFormat":
        return {"memory_format": r.choice(["contiguous_format", "preserve_format", "channels_last"])}
    return {"device": "cpu"}


def _off(case: Case, sizes: list, p=0.2) -> list:
    """sizes, or with probability p one of them changed (a mismatch, an empty or a size-1 dim)."""
    r = case.rng
    sizes = list(sizes)
    if sizes and r.random() < p:
        d = r.randrange(len(sizes))
        sizes[d] = r.choice([0, 1, sizes[d] + 1, sizes[d] + 3, max(sizes[d] - 1, 0)])
    return sizes


def attention(case: Case) -> dict:
    r = case.rng
    case.dtype = r.choice(["float32", "float32", "float64", "bfloat16"])
    b, h, lq, s, e = r.choice([1, 2, 3]), r.choice([1, 2, 4]), r.choice([1, 3, 8]), r.choice([1, 3, 8]), r.choice([1, 4, 8, 16])
    hk = r.choice([h, h, max(h // 2, 1)])
    q, k, v = [b, h, lq, e], [b, hk, s, e], [b, hk, s, e]
    chains = {}
    attack = r.choice(["none"] * 4 + ["batch1", "heads", "k_longer", "v_longer", "empty_kv", "empty_q", "width",
                                       "rank", "batch"])
    if attack == "batch1" and b > 1:            # value (or key) of batch 1 with a 2**40 batch stride
        who = r.choice(["value", "key"])
        (v if who == "value" else k)[0] = 1
        chains[who] = [("aten.slice.Tensor", [0, 0, 1, 2 ** 40])]
    elif attack == "heads":
        q[1], k[1], v[1] = 4, 3, 3
    elif attack in ("k_longer", "v_longer"):
        (k if attack == "k_longer" else v)[2] = s + r.randint(1, 40)
    elif attack == "empty_kv":
        k[2] = v[2] = 0
    elif attack == "empty_q":
        q[2] = 0
    elif attack == "width":
        r.choice([k, v])[3] = e + 1
    elif attack == "rank":
        r.choice([q, k, v]).pop(0)
    elif attack == "batch":
        r.choice([k, v])[0] = b + 1
    out = {n: case.tensor(shape, chain=chains.get(n)) for n, shape in (("query", q), ("key", k), ("value", v))}
    mask = None
    if r.random() < 0.4:
        full = [b, h, lq, s]
        shape = [n if r.random() < 0.6 else 1 for n in (full[2:] if r.random() < 0.4 else full)]
        mask = case.tensor(_off(case, shape, 0.15), r.choice(["bool", case.dtype]))
    out.update(attn_mask=mask, attn_bias=mask, dropout_p=0.0 if r.random() < 0.95 else 0.5,
               is_causal=r.random() < 0.3 and mask is None, scale=r.choice([None, None, 0.125, 2.0]),
               enable_gqa=r.random() < 0.5, return_debug_mask=r.random() < 0.03, compute_log_sumexp=r.random() < 0.5)
    return out


def product(case: Case) -> dict:
    r = case.rng
    case.dtype = r.choice(FLOAT_NAMES + ["int64"])
    m, k, n, b = (r.choice([0, 1, 2, 3, 5, 8]) for _ in range(4))
    t = case.tensor
    name = case.base
    if name in ("mm", "addmm"):
        out = {"self" if name == "mm" else "mat1": t(_off(case, [m, k])), "mat2": t(_off(case, [k, n]))}
        res = [m, n]
    elif name in ("bmm", "baddbmm", "addbmm"):
        out = {"self" if name == "bmm" else "batch1": t(_off(case, [b, m, k])),
               "mat2" if name == "bmm" else "batch2": t(_off(case, [b, k, n]))}
        res = [b, m, n] if name != "addbmm" else [m, n]
    elif name in ("mv", "addmv"):
        out, res = {"self" if name == "mv" else "mat": t(_off(case, [m, k])), "vec": t(_off(case, [k]))}, [m]
    elif name == "dot":
        out, res = {"self": t(_off(case, [k])), "tensor": t(_off(case, [k]))}, []
    elif name == "linear":
        lead = case.shape(r.randint(0, 2))
        out = {"input": t(_off(case, lead + [k])), "weight": t(_off(case, r.choice([[n, k], [k]])))}
        out["bias"] = r.choice([None, t(_off(case, [n]))])
        return out
    else:                                      # matmul: ranks 1-4, batch dims broadcast
        lead = case.shape(r.randint(0, 2))
        out = {"self": t(_off(case, r.choice([[k], lead + [m, k]]))),
               "other": t(_off(case, r.choice([[k], [k, n], case.variant(lead) + [k, n]])))}
        return out
    if name.startswith("add") or name == "baddbmm":
        out["self"] = t(case.variant(res) if name == case.name else res)
        out.update(beta=r.choice([1, 0, 0.5, {"float": "nan"}]), alpha=r.choice([1, 2, -1]))
    out["out_dtype"] = {"dtype": r.choice(["float32", case.dtype])}
    return out


def convolution(case: Case) -> dict:
    r = case.rng
    case.dtype = r.choice(["float32", "float32", "float64", "bfloat16"])
    nd, g = r.choice([1, 1, 2]), r.choice([1, 1, 2])
    n, cin, cout = r.choice([1, 2]), g * r.choice([1, 2]), g * r.choice([1, 2])
    kernel = [r.choice([1, 2, 3]) for _ in range(nd)]
    spatial = [r.choice([0, 1, 4, 7]) for _ in range(nd)]
    transposed = r.random() < 0.3
    weight = [cin, cout // g] + kernel if transposed else [cout, cin // g] + kernel
    stride = [r.choice([1, 1, 2, 3]) for _ in range(nd)]
    dilation = [r.choice([1, 1, 2]) for _ in range(nd)]
    ints = {"stride": stride, "padding": [r.choice([0, 0, 1, 2]) for _ in range(nd)], "dilation": dilation,
            "output_padding": [r.randrange(max(s, d)) if transposed else 0 for s, d in zip(stride, dilation)]}
    if r.random() < 0.2:
        key = r.choice(list(ints))
        ints[key][0] = r.choice([0, -1, 2 ** 40, 5])
    return {"input": case.tensor(_off(case, [n, cin] + spatial)), "weight": case.tensor(_off(case, weight)),
            "bias": r.choice([None, case.tensor(_off(case, [cout]))]), **ints, "transposed": transposed,
            "groups": g if r.random() < 0.9 else r.choice([0, 3, -1])}


def norm(case: Case) -> dict:
    r = case.rng
    case.dtype = r.choice(FLOAT_NAMES)
    x = case.main = case.shape(r.randint(1, 4)) if case.base != "native_group_norm" else case.shape(r.randint(2, 4))
    if "group" in case.base:
        x[0:2] = [max(x[0], 1), r.choice([2, 4, 6])]
        groups = r.choice([1, 2, x[1]]) if r.random() < 0.85 else r.choice([0, 4, 5, -1])
        hw = 1
        for s in x[2:]:
            hw *= s
        affine = _off(case, [x[1]], 0.15)
        out = {"input": case.tensor(x), "num_groups": groups, "group": groups, "weight": case.tensor(affine),
               "bias": r.choice([None, case.tensor(affine)])}
        out.update(zip(("N", "C", "HxW"), _off(case, [x[0], x[1], hw], 0.2)))
        return out
    k = r.randint(1, len(x))
    shape = _off(case, x[-k:], 0.15)
    affine = _off(case, shape, 0.1)
    return {"input": case.tensor(x), "normalized_shape": shape, "weight": r.choice([None, case.tensor(affine)]),
            "bias": r.choice([None, case.tensor(affine)]), "eps": r.choice([1e-5, 1e-6, 0.0, None])}


def softmax(case: Case) -> dict:
    r = case.rng
    case.dtype = r.choice(FLOAT_NAMES + ["int64"])
    return {"self": case.tensor(case.main), "dim": case.dims(len(case.main)), "half_to_float": r.random() < 0.05}


def index_reads(case: Case) -> dict:
    r = case.rng
    x = case.main = case.shape(r.randint(1, 3))
    rank = len(x)
    d = case.dims(rank)
    n = x[d] if -rank <= d < rank else 1
    bad = r.choice([0, 0, 0, 0.3])
    kind = r.choice(["int64", "int64", "int64", "int32", "float32"])
    if case.base == "embedding":
        v, e = r.choice([1, 3, 10]), r.choice([1, 4])
        return {"weight": case.tensor(_off(case, [v, e], 0.1)), "indices": case.tensor(case.shape(r.randint(0, 3)), kind,
                (0, v), bad), "padding_idx": r.choice([-1, -1, 0, v, 2 ** 40])}
    if case.base == "index_select":
        return {"self": case.tensor(x), "dim": d, "index": case.tensor(case.shape(r.choice([1, 1, 0, 2])), kind, (0, n), bad)}
    if case.base == "index":
        idx = []
        for i in range(r.randint(1, rank + 1)):
            m = x[i] if i < rank else 1
            idx.append(r.choice([None, case.tensor(case.shape(r.randint(0, 2)), kind, (-m, m), bad),
                                 case.tensor(x[i:i + 1], "bool")]))
        return {"self": case.tensor(x), "indices": idx}
    shape = [r.randint(0, s) for s in x]       # gather / scatter: index no larger than self
    out = {"self": case.tensor(x), "dim": d, "index": case.tensor(_off(case, shape, 0.1), kind, (0, n), bad)}
    out["src"] = case.tensor(_off(case, [s + r.choice([0, 0, 1]) for s in shape], 0.1))
    return out


def einsum(case: Case) -> dict:
    r = case.rng
    case.dtype = r.choice(FLOAT_NAMES)
    eq = r.choice(["ij,jk->ik", "bij,bjk->bik", "i,i->", "ij->ji", "ii->i", "ij,j->i", "...ij,...jk->...ik",
                   "bhqd,bhkd->bhqk", "ij,ij->ij", "i,j->ij", "ij,jk,kl->il", "ij,k", "i->ij", "abc"])
    sizes = {c: r.choice([0, 1, 2, 3]) for c in "ijklbhqdabc"}
    ops = []
    for term in eq.split("->")[0].split(","):
        lead = case.shape(r.randint(0, 2)) if term.startswith("...") else []
        ops.append(case.tensor(_off(case, lead + [sizes[c] for c in term.replace("...", "")], 0.1)))
    path = r.choice([None, None, None, [0, 1], [0, 1, 0, 1], [5, 7], [0, 0, 1, 1]])
    return {"equation": eq, "tensors": ops, "path": path}


def concat(case: Case) -> dict:
    r = case.rng
    x, d = case.main, case.dims(len(case.main))
    parts = []
    for _ in range(r.randint(1, 3)):
        shape = list(x)
        if case.base == "cat" and -len(x) <= d < len(x):
            shape[d] = r.randint(0, 3)
        parts.append(case.tensor(_off(case, shape, 0.15) if r.random() < 0.9 else [0],
                                 r.choice([case.dtype] * 4 + ["float64", "int64"])))
    return {"tensors": parts, "dim": d}


def sized(case: Case) -> dict:
    """Views and fresh tensors whose sizes come from int arguments."""
    r, x = case.rng, case.main
    rank, numel = len(x), 1
    for s in x:
        numel *= s
    d = case.dims(rank)
    n = x[d] if -rank <= d < rank else 1
    size = r.choice([list(x), [numel], [-1], [numel, 1], x[::-1], case.shape(), [1] + list(x), [-1] + list(x[1:]),
                     [2 ** 40, 0], [2 ** 40 + 1, 2 ** 40]])
    grow = [r.choice([n, n, 1, 3, -1]) for n in x]
    out = {"size": size, "shape": size, "dim": d, "dims": r.sample(range(rank), rank) if r.random() < 0.8 else [0, 0],
           "start": r.choice([0, 1, -1, n, 2 ** 40, 2 ** 63 - 1]), "end": r.choice([n, 1, -1, 2 ** 63 - 1, None]),
           "step": r.choice([1, 1, 2, 3, 2 ** 40, 0]), "length": r.choice([0, 1, n, n + 1]),
           "index": r.choice([0, -1, n - 1, n, 2 ** 40]), "offset": r.randint(-3, 3), "diagonal": r.randint(-3, 3),
           "dimension": d, "repeats": [r.choice([0, 1, 2, 3]) for _ in range(rank + r.randint(0, 2))],
           "pad": [r.choice([0, 1, 2, -1, -3]) for _ in range(2 * r.randint(0, rank))],
           "shifts": [r.choice([1, -2, 2 ** 40]) for _ in range(r.randint(1, 2))], "k": r.choice([0, 1, n, n + 1]),
           "chunks": r.choice([1, 2, 3, 0]), "sections": r.choice([1, 2, 3, 0]), "split_size": r.choice([1, 2, 0]),
           "split_sizes": r.choice([[n], [1, max(n - 1, 0)], [n + 1]]), "indices": [r.randint(0, 5), r.randint(0, 5)],
           "start_dim": 0, "end_dim": -1, "n": r.choice([0, 1, 3]), "m": r.choice([0, 2]), "steps": r.choice([0, 1, 5]),
           "sizes": r.choice([[n], [1, n], [-1, 1], [2, -1]])}
    if case.base in ("expand", "expand_copy", "broadcast_to"):
        out["size"] = r.choice([grow, [2] + grow, [2 ** 40] + grow])
    if case.base == "repeat_interleave":
        out["repeats"] = r.choice([2, 0, case.tensor([r.choice([1, n, 2])], "int64", (0, 3), r.choice([0, 0.3]))])
        out["self"] = case.tensor(x)
    if case.base in ("tile",):
        out["dims"] = out["repeats"]
    if case.base in ("arange", "linspace", "scalar_tensor", "full", "new_full", "fill", "full_like"):
        out.update(start=r.choice([0, 1, -2.5]), end=r.choice([5, 10.5, 0, 2 ** 40]), step=r.choice([1, 0.5, -1, 3]),
                   size=case.shape(r.randint(0, 3)) if r.random() < 0.9 else [2 ** 40, 2 ** 20])
    if case.base == "_assert_tensor_metadata":
        out.update(size=list(x), stride=None)
    if case.base == "narrow" and case.overload == "Tensor":
        out["start"] = case.tensor([], "int64", (0, n + 1))
    if case.base == "tensor_split" and case.overload == "tensor_indices_or_sections":
        out["tensor_indices_or_sections"] = case.tensor(r.choice([[], [2]]), "int64", (0, n + 1))
    return out


# Operators whose result sums or compares many inputs in an order that depends on the layout: their
# data is mostly finite and moderate, so a reference on other strides agrees closely.
ACCUMULATING = set("""addbmm addmm addmv baddbmm bmm dot linear matmul mm mv einsum convolution layer_norm
    native_layer_norm group_norm native_group_norm rms_norm _fused_rms_norm softmax log_softmax _softmax
    _log_softmax logsumexp sum mean prod norm linalg_vector_norm std var var_mean cumsum cumprod max min amax
    amin argmax argmin topk""".split()) | graph_ops.ATTENTION_OPS

def division(case: Case) -> dict:
    """Integer division at its edges: INT_MIN by -1 (a SIGFPE where truncated), by 0."""
    r = case.rng
    if r.random() < 0.5:
        return {}
    case.dtype = r.choice(["int64", "int32", "int16", "int8", "uint8"])
    x = case.main
    return {"self": case.tensor(x, heavy=True), "other": r.choice([-1, 0, case.tensor(case.variant(x), heavy=True)])}


FAMILIES = {**{n: attention for n in graph_ops.ATTENTION_OPS},
            **{n: product for n in "addbmm addmm addmv baddbmm bmm dot linear matmul mm mv".split()},
            "convolution": convolution, **{n: norm for n in "layer_norm native_layer_norm group_norm "
                                           "native_group_norm rms_norm _fused_rms_norm".split()},
            **{n: softmax for n in "softmax log_softmax _softmax _log_softmax".split()},
            **{n: index_reads for n in "embedding index index_select gather scatter".split()},
            "einsum": einsum, "cat": concat, "stack": concat,
            **{n: division for n in "div floor_divide remainder fmod true_divide".split()},
            **{n: sized for n in """view reshape _unsafe_view view_copy expand expand_copy broadcast_to permute
               permute_copy flatten unflatten unfold split split_with_sizes chunk tensor_split narrow select
               select_copy slice slice_copy diagonal diag squeeze squeeze_copy unsqueeze unsqueeze_copy transpose
               transpose_copy repeat tile roll flip constant_pad_nd pad tril triu topk cumsum cumprod
               repeat_interleave arange linspace eye full zeros ones new_full new_ones new_zeros scalar_tensor
               fill full_like _assert_tensor_metadata""".split()}}
