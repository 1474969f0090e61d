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
