"""The operators a recorded graph may call, each with how its memory safety is ensured, and the
checks that keep every kernel inside the memory it was given.

harness/graph.py resolves every node against ALLOWED before anything runs: check_op (the overload
takes and returns only plain types, writes nothing but its own first argument, is not random) and
check_node (every literal has its schema's type, ints are bounded, dtypes and layouts are plain).
Right before each kernel runs it calls check_call on the actual arguments, and it checks every
tensor a node returns with within_storage. Memory safety rests on three things; each ALLOWED group
says which ones it relies on:

- within_storage: every element a tensor's sizes, strides and offset address lies in its storage
  (exact integer arithmetic, no overflow), for weights and constants at load and for every tensor a
  node returns, so every tensor a kernel is handed passes it;
- taming (check_call, every call): a size-1 dimension's stride addresses nothing, so within_storage
  cannot bound it (`slice` with a huge step on a size-1 dimension makes one of 2**40); before any
  kernel sees a tensor, such a stride larger than the whole storage is reset to the one `unsqueeze`
  would give, so no kernel multiplies an index, or a leading dimension, by a stride that can wrap;
- preconditions (check_call): where a native kernel trusts one operand's sizes to index another
  (attention, products), takes sizes as ints (native_group_norm), takes indices from data, computes
  a size that can wrap, or traps (INT_MIN / -1), that is checked here; where it assumes a layout,
  an operand that is not dense is replaced by a contiguous copy the replay makes itself
  (`clone(memory_format=contiguous_format)`: `.contiguous()` keeps a size-1 dimension's stride).
scripts/fuzz_ops.py runs every accepted overload with adversarial arguments through this path.
Raw-stride views (as_strided, _reshape_alias, set_) are not here: they address past a storage's end.
"""
from __future__ import annotations

import math

import torch

# Element count no tensor of a graph may reach: far beyond any model here, and far below where a
# count times an element size wraps an int64 (torch's own products wrap: tile([2**62 + 1]) of 4
# elements gives 4).
MAX_ELEMENTS = 1 << 40
# Bound on every int literal (sizes, dims, steps, pads): a product of a few of them cannot wrap.
# slice's start and end are exempt: torch clamps them, and the recorder writes an open end as 2**63-1.
MAX_INT = 1 << 40
UNBOUNDED_INTS = {"slice": ("start", "end"), "slice_copy": ("start", "end")}
# The dtypes a tensor of the replay may have: no complex, quantized, bit, float8 or wide unsigned
# types, whose kernels are few and little used.
DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                    torch.float16, torch.bfloat16, torch.float32, torch.float64})
FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
INDEX_DTYPES = frozenset({torch.int32, torch.int64})
# Schema types an accepted overload may take (a reference is a Tensor, a literal one of the rest).
PLAIN_TYPES = frozenset("""Tensor List[Tensor] List[Optional[Tensor]] int List[int] float number bool str
    ScalarType Layout MemoryFormat Device""".split())
MAX_STR = 256

_WITHIN = "; within_storage bounds what it reads"
_REASONS = {
    "pointwise through TensorIterator: torch checks that the shapes broadcast and reads each operand "
    "only at offsets its own sizes and strides give" + _WITHIN + "; integer division by zero is "
    "refused by torch, INT_MIN / -1 truncated (a SIGFPE) by check_call": """
        abs acos acosh add addcdiv addcmul asin asinh atan atan2 atanh bitwise_and bitwise_not
        bitwise_or bitwise_xor ceil clamp clamp_max clamp_min cos cosh div elu eq erf erfc erfinv
        exp exp2 expm1 floor floor_divide fmod frac ge gelu glu gt hardsigmoid hardswish hardtanh
        isinf isnan le leaky_relu lerp log log10 log1p log2 log_sigmoid logaddexp logical_and
        logical_not logical_or logical_xor logit lt masked_fill maximum minimum mish mul nan_to_num
        ne neg pow reciprocal relu relu6 remainder round rsqrt rsub selu sigmoid sign silu sin sinh
        softplus sqrt square sub tanh true_divide trunc where xlogy""",
    "reduction through TensorIterator, or a loop over slices of the input's own sizes and strides "
    "(cumsum, cumprod, topk: k checked by torch)" + _WITHIN: """
        all amax amin any argmax argmin cumprod cumsum logsumexp max mean min norm
        linalg_vector_norm prod std sum var var_mean topk""",
    "matrix product: check_call checks the operands' ranks, contraction and batch sizes and the "
    "bias's broadcast; BLAS gets leading dimensions from strides within_storage bounds (tamed where "
    "a size is 1) or torch copies the operand first; einsum, matmul and linear are products torch "
    "composes of these (einsum's contraction path bounds-checked by torch)": """
        addbmm addmm addmv baddbmm bmm dot einsum linear matmul mm mv""",
    "convolution: input, weight and bias passed dense by check_call (else copied contiguous); ranks, "
    "channels, groups, stride, padding and dilation checked by torch (ints bounded by check_node)": "convolution",
    "normalisation / softmax: the kernels read contiguous inputs (torch copies others) whose sizes "
    "torch checks against normalized_shape, dim or groups; native_group_norm's N, C, HxW and group "
    "and group_norm's groups and affine sizes checked by check_call": """
        layer_norm native_layer_norm group_norm native_group_norm rms_norm _fused_rms_norm softmax
        log_softmax _softmax _log_softmax""",
    "attention kernel (the kernels index key and value with the query's batch and heads, and read "
    "rows as if the last stride were 1): check_call requires 4-D query, key, value of one floating "
    "dtype, the same batch, kv heads, key length and head width, query heads a multiple of kv heads "
    "only where the op allows grouped-query attention, nothing empty (an empty key length divides "
    "by zero), a mask that broadcasts to [B, heads, L, S] (a CUDA kernel's bias: that shape, unit "
    "last stride), and passes them dense with a unit last stride (else copied contiguous); dropout "
    "and the debug mask refused by check_node": """
        scaled_dot_product_attention _scaled_dot_product_flash_attention
        _scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_efficient_attention
        _scaled_dot_product_cudnn_attention""",
    "read or write at indices taken from data: check_call checks every index tensor's dtype and "
    "range before the call (torch checks them on CPU, a CUDA kernel only asserts); shapes checked "
    "by torch": "embedding index index_select gather scatter",
    "view: sizes, strides and offset from torch's checked view arithmetic, then within_storage on "
    "the result; a view as bool (bytes other than 0 and 1) is refused by check_node": """
        alias broadcast_to chunk detach diagonal expand expand_as flatten lift_fresh narrow permute
        reshape select slice split split_with_sizes squeeze t tensor_split transpose unbind
        unflatten unfold unsqueeze view view_as _unsafe_view contiguous to type_as""",
    "copy into a fresh tensor through TensorIterator (the *_copy twin of a checked view, casts, "
    "flip, roll) or a loop over the input's own sizes and strides (tril, triu, cat's per-input "
    "copies; shapes checked by torch)" + _WITHIN: """
        alias_copy detach_copy expand_copy lift_fresh_copy permute_copy select_copy slice_copy
        squeeze_copy t_copy transpose_copy unsqueeze_copy view_copy clone _to_copy cat stack
        flip roll tril triu""",
    "fresh tensor sized by int arguments (padding, repetition, repeats from data): check_call "
    "computes the output's element count exactly and bounds it (torch's own product can wrap), "
    "repeats from data non-negative; filled through TensorIterator": """
        constant_pad_nd pad repeat tile repeat_interleave diag""",
    "fresh tensor with a stated value or range, never random or uninitialised: sizes checked for "
    "overflow by torch and bounded by check_call": """
        arange eye fill full full_like linspace new_full new_ones new_zeros ones ones_like
        scalar_tensor zeros zeros_like""",
    "a metadata assertion the recorder emits; reads no data": "_assert_tensor_metadata",
}
# Operator (aten base name) -> how the evaluator keeps it in bounds. Their in-place `name_` forms
# are accepted too, except for views (an in-place view op rewrites a tensor's sizes: state), and
# only write into storage the same call allocated (harness/graph.py).
ALLOWED: dict[str, str] = {name: why for why, names in _REASONS.items() for name in names.split()}
VIEWS = frozenset(n for why, names in _REASONS.items() if why.startswith("view:") for n in names.split())
ATTENTION_OPS = frozenset(n for n in ALLOWED if "attention" in n)
# Attention ops whose kernel maps query heads onto fewer key/value heads (grouped-query attention).
GQA_OPS = frozenset({"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention"})


class GraphError(ValueError):
    """The graph is malformed or asks for something the evaluator refuses (the message says what)."""


class PreconditionError(GraphError):
    """A call's arguments are not what its native kernel assumes (check_call; the message says what)."""


def base_name(name: str) -> str:
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


def _bare(t) -> str:
    t = str(t)
    return t[9:-1] if t.startswith("Optional[") else t


def check_op(op: str, name: str, overload: str):
    """The OpOverload torch.ops.aten.<name>.<overload>, if accepted (else GraphError)."""
    base = base_name(name)
    if base not in ALLOWED:
        raise GraphError(f"operator aten.{name} is not on the evaluator's list (harness/graph_ops.py ALLOWED)")
    if base != name and base in VIEWS:
        raise GraphError(f"operator {op} changes a tensor's sizes in place: a replay may not keep state")
    packet = getattr(torch.ops.aten, name, None)
    target = getattr(packet, overload, None) if packet is not None else None
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        raise GraphError(f"operator {op} does not exist in this torch")
    schema = target._schema
    if any(a.is_out for a in schema.arguments):
        raise GraphError(f"operator {op} writes into an out= argument")
    if any("Generator" in str(a.type) for a in schema.arguments):
        raise GraphError(f"operator {op} is random")
    # TorchScript's list, string and number overloads (add.int, mul.left_t, to.prim_dtype), varargs
    odd = [str(a.real_type) for a in schema.arguments if _bare(a.real_type) not in PLAIN_TYPES]
    returns = {_bare(r.real_type) for r in schema.returns}
    if odd or overload.startswith("prim_") or "..." in str(schema) or not returns <= {"Tensor", "List[Tensor]", "int"} \
            or not (returns & {"Tensor", "List[Tensor]"} or base == "_assert_tensor_metadata"):
        raise GraphError(f"operator {op} is not a tensor operator of plain arguments ({', '.join(odd) or schema})")
    writes = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    if base != name and writes != [0]:
        raise GraphError(f"operator {op} writes somewhere other than its own first argument")
    if base == name and writes:
        raise GraphError(f"operator {op} writes into an argument")
    if torch.Tag.nondeterministic_seeded in target.tags:
        # Attention kernels are tagged random for their dropout: accepted in their default form,
        # with dropout_p checked to be 0 where the node is (check_node).
        if base not in ATTENTION_OPS or overload != "default":
            raise GraphError(f"operator {op} is random")
    return target


def accepted_overloads():
    """Every (name, overload, OpOverload) that check_op accepts: the surface a graph can reach."""
    for base in sorted(ALLOWED):
        for name in (base, base + "_"):
            packet = getattr(torch.ops.aten, name, None)
            for overload in packet.overloads() if packet is not None else ():
                try:
                    yield name, overload, check_op(f"aten.{name}.{overload}", name, overload)
                except GraphError:
                    pass


def _arg(node: dict, op, name: str, default):
    names = [a.name for a in op._schema.arguments]
    if name not in names:
        return default
    i = names.index(name)
    return node["args"][i] if i < len(node["args"]) else node["kwargs"].get(name, default)


def check_node(node: dict, op) -> None:
    """Arguments refused whatever the data: attention dropout, the attention's debug mask (memory a
    kernel may leave unwritten: it could hold a previous call's bytes), an output size a kernel
    would trust instead of computing (repeat_interleave on a GPU does not check it), a literal not
    of its schema's type (a raw int where a dtype, layout or memory format goes is an unchecked
    enum), an int beyond MAX_INT, a dtype outside DTYPES, a layout other than strided, a view as bool."""
    where = f"node {node['name']} ({node['op']})"
    p = _arg(node, op, "dropout_p", 0.0)
    if p != 0 and p != 0.0:
        raise GraphError(f"{where} uses dropout (p={p!r}): the evaluation is deterministic")
    if _arg(node, op, "return_debug_mask", False) is not False:
        raise GraphError(f"{where} asks for the attention's debug mask: refused, its memory is not always written")
    if _arg(node, op, "output_size", None) is not None:
        raise GraphError(f"{where} states its own output size: refused, torch does not check it on every device")
    schema = op._schema
    names = [a.name for a in schema.arguments]
    if len(node["args"]) > len(names) or set(node["kwargs"]) - set(names):
        raise GraphError(f"{where} passes arguments its operator does not take")
    base = base_name(schema.name.split("::")[1])
    for i, a in enumerate(schema.arguments):
        if i < len(node["args"]) or a.name in node["kwargs"]:
            v = node["args"][i] if i < len(node["args"]) else node["kwargs"][a.name]
            if not _literal_ok(str(a.real_type), v, a.name in UNBOUNDED_INTS.get(base, ())):
                raise GraphError(f"{where}: argument {a.name} is not a {a.real_type} the evaluator accepts "
                                 f"(ints within 2**40, dtypes {sorted(str(d)[6:] for d in DTYPES)}, strided layout)")
    if base in ("view", "view_copy") and schema.overload_name == "dtype" and _arg(node, op, "dtype", None) == {"dtype": "bool"}:
        raise GraphError(f"{where} views bytes as bool: a byte other than 0 and 1 is not a bool")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _literal_ok(t: str, v, unbounded: bool) -> bool:
    if v is None:
        return t.startswith("Optional[")
    t = _bare(t)
    ref = isinstance(v, dict) and "ref" in v
    if t == "Tensor":      # a number becomes a fresh 0-dim tensor torch makes itself
        return ref or _literal_ok("number", v, False)
    if t.startswith("List[") and "Tensor" in t:
        return ref or isinstance(v, list) and all((isinstance(x, dict) and "ref" in x) or (x is None and "Optional" in t)
                                                 for x in v)
    if t in ("int", "List[int]"):     # a reference: a 0-dim tensor from data, checked by check_call
        items = v if isinstance(v, list) and t == "List[int]" else [v]
        return all((isinstance(x, dict) and "ref" in x) or (_is_int(x) and (unbounded or abs(x) <= MAX_INT))
                   for x in items)
    if ref:
        return False
    if t in ("float", "number"):
        return isinstance(v, (int, float)) and (t == "number" or not isinstance(v, bool)) or \
            (isinstance(v, dict) and set(v) == {"float"})
    if t == "bool":
        return isinstance(v, bool)
    if t == "str":
        return isinstance(v, str) and len(v) <= MAX_STR
    kind = {"ScalarType": "dtype", "Layout": "layout", "MemoryFormat": "memory_format", "Device": "device"}[t]
    if not (isinstance(v, dict) and set(v) == {kind}):
        return False
    return (kind != "dtype" or getattr(torch, str(v[kind]), None) in DTYPES) and (kind != "layout" or v[kind] == "strided")


# ---- before each call ---------------------------------------------------------------------------

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


# ---- after each call ----------------------------------------------------------------------------

def storage_id(t: torch.Tensor) -> int:
    """The storage's identity (its StorageImpl), distinct even for empty storages (data_ptr 0)."""
    return t.untyped_storage()._cdata


def within_storage(t: torch.Tensor) -> bool:
    """A plain strided tensor of an accepted dtype, and every element its sizes, strides and offset
    address lies inside its storage. A size-1 dimension addresses only index 0, whatever its
    stride: its stride is left to tame(), which resets it before any kernel sees the tensor."""
    if t.layout != torch.strided or t.is_nested or t.dtype not in DTYPES:
        return False
    if t.numel() == 0:
        return t.storage_offset() >= 0
    lo = hi = t.storage_offset()
    for size, stride in zip(t.shape, t.stride()):
        span = (size - 1) * stride
        if span < 0:
            lo += span
        else:
            hi += span
    return lo >= 0 and (hi + 1) * t.element_size() <= t.untyped_storage().nbytes()


def tensors_in(value):
    """The tensors of a node's result (a tensor, or a tuple/list of them)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v
