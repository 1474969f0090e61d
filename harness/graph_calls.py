"""Right before each kernel of a replayed graph runs: the preconditions its native kernel assumes,
and operands it may index with strides tamed or made dense (harness/graph_ops.py says why each
allowlisted operator is memory-safe; this is the "taming" and "preconditions" part of it).

harness/graph.py calls check_call(node, op, args, kwargs) with the actual arguments of every call;
it returns the arguments the kernel gets (tamed, or replaced by contiguous copies the replay made
itself) or raises PreconditionError naming the node, the op and what is wrong.
"""
from __future__ import annotations

import math

import torch

if __package__:           # harness.graph_calls, or beside graph_ops in the evaluator's folder
    from .graph_ops import (ATTENTION_OPS, FLOATS, GQA_OPS, INDEX_DTYPES, MAX_ELEMENTS, MAX_INT, PreconditionError, _bare, base_name)
else:
    from graph_ops import (ATTENTION_OPS, FLOATS, GQA_OPS, INDEX_DTYPES, MAX_ELEMENTS, MAX_INT, PreconditionError, _bare, base_name)

class _Plan:
    """Per overload: argument names and defaults, where the tensors are, and its preconditions."""
    __slots__ = ("schema", "names", "index", "defaults", "slots", "int_slots", "pre", "name")

    def __init__(self, schema):
        self.schema = schema          # kept alive: plans are found by id(schema)
        self.names = [a.name for a in schema.arguments]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
        self.name = base_name(schema.name.split("::")[1])
        self.slots = [i for i, a in enumerate(schema.arguments) if "Tensor" in str(a.real_type)
                      and self.name != "_assert_tensor_metadata"]      # compares strides, reads nothing
        self.int_slots = [i for i, a in enumerate(schema.arguments) if _bare(a.real_type) in ("int", "List[int]")]
        self.pre = _PRE.get(self.name)


_PLANS: dict[int, _Plan] = {}


class _Call:
    """One call's arguments, read and replaced by schema name."""
    __slots__ = ("node", "plan", "args", "kwargs")

    def __init__(self, node, plan, args, kwargs):
        self.node, self.plan, self.args, self.kwargs = node, plan, args, kwargs

    def get(self, name, default=None):
        i = self.plan.index.get(name)
        if i is None:
            return default
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, self.plan.defaults.get(name, default))

    def set(self, name, value):
        i = self.plan.index[name]
        if i < len(self.args):
            self.args[i] = value
        elif name in self.kwargs:
            self.kwargs[name] = value

    def refuse(self, what):
        raise PreconditionError(f"node {self.node['name']} ({self.node['op']}): {what}")

    def tensor(self, name, dims=None):
        t = self.get(name)
        if not isinstance(t, torch.Tensor) or (dims is not None and t.dim() not in dims):
            self.refuse(f"{name} must be a tensor" + (f" of {' or '.join(map(str, dims))} dimensions" if dims else ""))
        return t

    def dense(self, *names):
        """Each named tensor as it is if it is dense (its elements fill a block of its storage, in
        some order of dimensions, each once) with a unit last stride, else a contiguous copy: a kernel
        that assumes a layout gets one, and an honest permuted layout (q as [B, T, H, D] transposed)
        keeps its own, so the output's layout stays what the recorded graph's views expect."""
        for name in names:
            t = self.get(name)
            if isinstance(t, torch.Tensor) and not dense(t):
                self.set(name, t.clone(memory_format=torch.contiguous_format))


def check_call(node: dict, op, args: list, kwargs: dict):
    """The arguments node's kernel is called with: every tensor tamed (size-1 strides reset), then
    the operator's preconditions checked and, where its kernel assumes a layout, contiguous copies
    put in place. Refuses (GraphError) what the kernel could not run inside its operands' memory."""
    schema = op._schema
    plan = _PLANS.get(id(schema))
    if plan is None:
        plan = _PLANS[id(schema)] = _Plan(schema)
    for i in plan.slots:
        if i < len(args):
            args[i] = _tame_value(args[i])
        else:
            name = plan.names[i]
            if name in kwargs:
                kwargs[name] = _tame_value(kwargs[name])
    for i in plan.int_slots:
        if i < len(args):
            args[i] = _from_data(args[i], node)
        elif plan.names[i] in kwargs:
            kwargs[plan.names[i]] = _from_data(kwargs[plan.names[i]], node)
    if plan.pre is not None:
        plan.pre(_Call(node, plan, args, kwargs))
    return args, kwargs


def _from_data(v, node):
    """Sizes taken from data (0-dim integer tensors in an int argument) as the ints they hold, bounded
    like a literal; anything else as it is."""
    if isinstance(v, list):
        return [_from_data(x, node) for x in v]
    if isinstance(v, torch.Tensor):
        if v.dim() != 0 or v.dtype not in INDEX_DTYPES or abs(int(v)) > MAX_INT:
            raise PreconditionError(f"node {node['name']} ({node['op']}): a size from data must be a 0-dim int "
                                    f"tensor within 2**40 (got {v.dtype} {tuple(v.shape)})")
        return int(v)
    return v


def _tame_value(v):
    if isinstance(v, torch.Tensor):
        return tame(v)
    if isinstance(v, (list, tuple)):
        return [tame(t) if isinstance(t, torch.Tensor) else t for t in v]
    return v


def tame(t: torch.Tensor) -> torch.Tensor:
    """t with every size-1 dimension's stride that is negative or larger than its whole storage
    reset to the next dimension's stride times its size (1 for the last: what unsqueeze gives):
    the same elements, no stride beyond its storage, and honest layouts untouched. (Its dtype and
    layout were checked by within_storage, as every tensor of a call is.)"""
    sizes = t.shape
    if 1 not in sizes:
        return t
    strides = t.stride()
    want, nxt, limit = list(strides), 1, t.untyped_storage().nbytes() // t.element_size()
    for d in range(len(sizes) - 1, -1, -1):
        if sizes[d] == 1 and not 0 <= want[d] <= limit:
            want[d] = nxt
        nxt = max(want[d], 1) * max(sizes[d], 1)
    if want != list(strides):
        t = t.as_strided(sizes, want, t.storage_offset())
    return t


def dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense with a unit last stride (after tame(): size-1 strides do not count)."""
    if t.is_contiguous() or t.numel() == 0:
        return True
    if t.shape[-1] != 1 and t.stride(-1) != 1:
        return False
    expect = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n != 1):
        if stride != expect:
            return False
        expect *= size
    return True


def _broadcasts(shape, target) -> bool:
    return len(shape) <= len(target) and all(s in (1, n) for s, n in zip(reversed(shape), reversed(target)))


def _attention(c: _Call):
    q, k, v = c.tensor("query", (4,)), c.tensor("key", (4,)), c.tensor("value", (4,))
    if not (q.dtype == k.dtype == v.dtype and q.dtype in FLOATS and q.device == k.device == v.device):
        c.refuse(f"query, key and value must share one floating dtype and device (got {q.dtype}, {k.dtype}, {v.dtype})")
    (b, hq, lq, e), (bk, hk, s, ek), (bv, hv, sv, ev) = q.shape, k.shape, v.shape
    if not b == bk == bv:
        c.refuse(f"query, key and value batch sizes differ ({b}, {bk}, {bv}): the kernel indexes all three with the query's")
    gqa = c.plan.name in GQA_OPS or c.get("enable_gqa", False) is True
    if hk != hv or not (hq == hk or (gqa and hk > 0 and hq % hk == 0)):
        c.refuse(f"{hq} query heads over {hk} key and {hv} value heads: "
                 + ("kv heads must be equal and divide the query heads" if gqa else "this op needs equal heads"))
    if s != sv or not e == ek == ev:
        c.refuse(f"key length {s} and value length {sv}, head widths {e}, {ek}, {ev}: they must match")
    if min(b, hq, hk, lq, s, e) < 1:
        c.refuse(f"empty attention (query {tuple(q.shape)}, key {tuple(k.shape)}): the kernel divides by these sizes")
    # attn_mask (CPU flash, sdpa) may broadcast: size-1 dims get stride 0 there; the CUDA kernels'
    # attn_bias is indexed [B, heads, L, S] as it is: it must be that shape (expanded is fine)
    bias = "attn_bias" in c.plan.index
    mask = c.get("attn_bias" if bias else "attn_mask")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dim() not in (2, 4) or mask.dtype not in (torch.bool, q.dtype) \
                or mask.device != q.device or not (tuple(mask.shape) == (b, hq, lq, s) if bias else
                                                   _broadcasts(mask.shape, (b, hq, lq, s))) \
                or (bias and s > 1 and mask.stride(-1) != 1):
            c.refuse(f"the attention mask ({getattr(mask, 'dtype', mask)} {tuple(getattr(mask, 'shape', ()))}) must be "
                     f"bool or {q.dtype}, " + (f"{[b, hq, lq, s]} with a unit last stride" if bias else
                                               f"2-D or 4-D, broadcasting to {[b, hq, lq, s]}"))
        if c.get("is_causal", False):
            c.refuse("is_causal and an explicit mask together")
    c.dense("query", "key", "value", *(() if bias else ("attn_mask",)))


# product -> its two factors and their ranks
_FACTORS = {"mm": ("self", 2, "mat2", 2), "addmm": ("mat1", 2, "mat2", 2), "mv": ("self", 2, "vec", 1),
            "addmv": ("mat", 2, "vec", 1), "dot": ("self", 1, "tensor", 1), "bmm": ("self", 3, "mat2", 3),
            "baddbmm": ("batch1", 3, "batch2", 3), "addbmm": ("batch1", 3, "batch2", 3)}


def _product(c: _Call):
    """Ranks and sizes of the matrix products' operands: contraction, batch, and what adds to them."""
    n, out = c.plan.name, None
    if n in _FACTORS:
        x, rx, y, ry = _FACTORS[n]
        a, b = c.tensor(x, (rx,)), c.tensor(y, (ry,))
        ok = a.shape[-1] == b.shape[-2 if ry > 1 else 0] and (rx < 3 or a.shape[0] == b.shape[0])
        out = tuple(a.shape[1 if n == "addbmm" else 0:-1]) + tuple(b.shape[max(ry - 1, 1):])
    elif n == "linear":
        a, b = c.tensor("input"), c.tensor("weight", (1, 2))
        ok, out = a.dim() >= 1 and a.shape[-1] == b.shape[-1], tuple(a.shape[:-1]) + tuple(b.shape[:-1])
    else:                                   # matmul: batch dims broadcast, checked by torch
        a, b = c.tensor("self"), c.tensor("other")
        ok = a.dim() >= 1 and b.dim() >= 1 and a.shape[-1] == b.shape[-2 if b.dim() >= 2 else 0]
    if not ok or a.dtype != b.dtype:
        c.refuse(f"operands {a.dtype} {tuple(a.shape)} and {b.dtype} {tuple(b.shape)} do not multiply")
    add = c.get("self") if n in ("addmm", "addmv", "baddbmm", "addbmm") else c.get("bias")
    if isinstance(add, torch.Tensor) and out is not None and not _broadcasts(add.shape, out):
        c.refuse(f"{tuple(add.shape)} does not broadcast to the product's {list(out)}")


def _convolution(c: _Call):
    c.dense("input", "weight", "bias")


def _native_group_norm(c: _Call):
    x = c.tensor("input")
    n, ch, hw, g = (c.get(k) for k in ("N", "C", "HxW", "group"))
    if not (x.dim() >= 2 and n * ch * hw == x.numel() and tuple(x.shape[:2]) == (n, ch) and g >= 1 and ch % g == 0):
        c.refuse(f"N, C, HxW, group = {n}, {ch}, {hw}, {g} do not describe the input {tuple(x.shape)}")
    _affine(c, ch)
    c.dense("input", "weight", "bias")


def _group_norm(c: _Call):
    x, g = c.tensor("input"), c.get("num_groups")
    if x.dim() < 2 or g < 1 or x.shape[1] % g:
        c.refuse(f"{g} groups do not divide the channels of the input {tuple(x.shape)}")
    _affine(c, x.shape[1])


def _affine(c: _Call, channels: int):
    for name in ("weight", "bias"):
        t = c.get(name)
        if t is not None and t.numel() != channels:
            c.refuse(f"{name} has {t.numel()} elements for {channels} channels")


def _in_range(c: _Call, name: str, idx, lo: int, hi: int, dtypes=INDEX_DTYPES):
    """Every element of the index tensor `idx` lies in [lo, hi)."""
    if not isinstance(idx, torch.Tensor) or idx.dtype not in dtypes:
        c.refuse(f"{name} must be a tensor of {sorted(str(d)[6:] for d in dtypes)}")
    if idx.numel():
        low, high = (int(x) for x in torch.aminmax(idx))
        if low < lo or high >= hi:
            c.refuse(f"{name} holds indices in [{low}, {high}], outside [{lo}, {hi})")


def _indexed(c: _Call):
    """Index ranges of embedding, index_select, gather, scatter and index (negative ones wrap only there)."""
    n = c.plan.name
    if n == "embedding":
        return _in_range(c, "indices", c.get("indices"), 0, c.tensor("weight", (2,)).shape[0])
    t = c.tensor("self")
    if n == "index":
        d = 0
        for i, idx in enumerate(c.get("indices")):
            if isinstance(idx, torch.Tensor) and idx.dtype in (torch.bool, torch.uint8):
                d += idx.dim()          # a mask: its shape checked by torch
            elif idx is not None:
                if d >= t.dim():
                    c.refuse(f"index {i} goes past the tensor's {t.dim()} dimensions")
                _in_range(c, f"index {i}", idx, -t.shape[d], t.shape[d])
                d += 1
            else:
                d += 1
        return
    idx, dim, rank = c.get("index"), c.get("dim"), max(t.dim(), 1)
    if not -rank <= dim < rank or (n == "index_select" and isinstance(idx, torch.Tensor) and idx.dim() > 1):
        c.refuse(f"dim {dim} of a tensor of {t.dim()} dimensions, or an index of more than 1 dimension")
    _in_range(c, "index", idx, 0, t.shape[dim] if t.dim() else 1, INDEX_DTYPES if n == "index_select" else {torch.int64})


def _sizes(c: _Call):
    """The output's element count, computed exactly (torch's own product can wrap) and bounded."""
    n, t = c.plan.name, c.get("self")
    if n in ("repeat", "tile"):
        reps = list(c.get("repeats" if n == "repeat" else "dims"))
        if (n == "repeat" and len(reps) < t.dim()) or min(reps, default=0) < 0:
            c.refuse(f"repeats {reps} for {t.dim()} dimensions")
        reps = [1] * (t.dim() - len(reps)) + reps
        count = math.prod(s * r for s, r in zip([1] * (len(reps) - t.dim()) + list(t.shape), reps))
    elif n in ("constant_pad_nd", "pad"):
        pad, sizes = list(c.get("pad")), list(t.shape)
        if len(pad) % 2 or len(pad) > 2 * t.dim():
            c.refuse(f"{len(pad)} pad values for {t.dim()} dimensions")
        for i in range(len(pad) // 2):
            sizes[-1 - i] += pad[2 * i] + pad[2 * i + 1]
        if min(sizes, default=0) < 0:
            c.refuse(f"padding {pad} leaves sizes {sizes}")
        count = math.prod(sizes)
    elif n == "diag":
        count = (t.shape[0] + abs(c.get("diagonal", 0))) ** 2 if t.dim() == 1 else 0
    elif n == "repeat_interleave":
        reps = c.get("repeats")
        if isinstance(reps, torch.Tensor):
            if reps.dim() > 1:
                c.refuse("repeats must have at most 1 dimension")
            _in_range(c, "repeats", reps, 0, MAX_ELEMENTS)
            total = int(reps.sum(dtype=torch.float64)) if reps.numel() else 0
            count = total * (1 if t is None else t.numel())
        elif reps < 0:
            c.refuse(f"negative repeats {reps}")
        else:
            count = t.numel() * reps
    else:                                   # factories
        size = c.get("size", [])
        size = [size] if isinstance(size, int) else list(size)
        if min(size, default=0) < 0:
            c.refuse(f"negative size {size}")
        count = max(math.prod(size), c.get("steps", 0), c.get("n", 0) * (c.get("m") or c.get("n", 0)))
    if not 0 <= count <= MAX_ELEMENTS:
        c.refuse(f"the result would have {count} elements (the limit is {MAX_ELEMENTS})")


def _div(c: _Call):
    """Integer division truncated towards zero traps (SIGFPE) on INT_MIN / -1 on x86."""
    a, b = c.get("self"), c.get("other")
    if c.get("rounding_mode") != "trunc" or not isinstance(a, torch.Tensor):
        return
    kind = torch.result_type(a, b)
    if kind in (torch.int32, torch.int64) and a.device.type == "cpu":
        low = torch.iinfo(kind).min
        if bool(((a == low) & (torch.as_tensor(b) == -1)).any()):
            c.refuse(f"{kind} division of {low} by -1 truncated: the CPU traps")


_PRE = {**{n: _attention for n in ATTENTION_OPS},
        **{n: _product for n in "addbmm addmm addmv baddbmm bmm dot linear matmul mm mv".split()},
        **{n: _indexed for n in "embedding index_select gather scatter index".split()},
        **{n: _sizes for n in """repeat tile constant_pad_nd pad diag repeat_interleave full zeros ones new_full
                                new_ones new_zeros eye linspace""".split()},
        "convolution": _convolution, "native_group_norm": _native_group_norm, "group_norm": _group_norm, "div": _div}


