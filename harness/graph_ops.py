"""The operators a recorded graph may call, each with the reason it is safe, and the checks that keep
a replay inside the memory it was given.

harness/graph.py resolves every node against ALLOWED before anything runs. An operator is here
only when (a) a transformer (or an unusual but causal variant of one) needs it, (b) it is a pure
function of its arguments: no randomness, no I/O, no global state, no uninitialised memory, and
(c) torch bounds-checks every memory access it makes (sizes and indices from data included).
View operators with raw sizes, strides and a storage offset (as_strided, as_strided_copy,
_reshape_alias, set_) are not here: _reshape_alias makes a view past its storage's end without a
check. Every tensor a node returns is checked against its storage anyway (within_storage).
"""
from __future__ import annotations

import torch

_REASONS = {
    "pointwise math; output freshly allocated, same-index reads of broadcast inputs": """
        abs acos acosh add addcdiv addcmul asin asinh atan atan2 atanh bitwise_and bitwise_not
        bitwise_or bitwise_xor ceil clamp clamp_max clamp_min cos cosh div elu eq erf erfc erfinv
        exp exp2 expm1 floor floor_divide fmod frac ge gelu glu gt hardsigmoid hardswish hardtanh
        isinf isnan le leaky_relu lerp log log10 log1p log2 log_sigmoid logaddexp logical_and
        logical_not logical_or logical_xor logit lt masked_fill maximum minimum mish mul nan_to_num
        ne neg pow reciprocal relu relu6 remainder round rsqrt rsub selu sigmoid sign silu sin sinh
        softplus sqrt square sub tanh true_divide trunc where xlogy""",
    "reduction along the dims the node names (norms, pooling, losses inside a model)": """
        all amax amin any argmax argmin cumprod cumsum logsumexp max mean min norm
        linalg_vector_norm prod std sum var var_mean topk""",
    "matrix product (projections, attention by hand, causal convolutions); shapes checked": """
        addbmm addmm addmv baddbmm bmm convolution dot einsum linear matmul mm mv""",
    "normalisation / softmax of a transformer block": """
        layer_norm native_layer_norm group_norm native_group_norm rms_norm _fused_rms_norm softmax
        log_softmax _softmax _log_softmax""",
    "attention kernel (dropout checked to be 0 where the node is)": """
        scaled_dot_product_attention _scaled_dot_product_flash_attention
        _scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_efficient_attention
        _scaled_dot_product_cudnn_attention""",
    "read at indices taken from data (embeddings, lookup tables); torch bounds-checks each index": """
        embedding index index_select gather scatter""",
    "view whose sizes torch derives and checks from its input (reshapes, transposes, slices)": """
        alias broadcast_to chunk detach diagonal expand expand_as flatten lift_fresh narrow permute
        reshape select slice split split_with_sizes squeeze t tensor_split transpose unbind
        unflatten unfold unsqueeze view view_as _unsafe_view contiguous to type_as""",
    "copy into a fresh tensor (the *_copy twin of a checked view, padding, concatenation, masks)": """
        alias_copy detach_copy expand_copy lift_fresh_copy permute_copy select_copy slice_copy
        squeeze_copy t_copy transpose_copy unsqueeze_copy view_copy clone _to_copy cat stack
        constant_pad_nd pad flip roll repeat tile tril triu repeat_interleave diag""",
    "fresh tensor with a stated value or range (positions, masks); never random or uninitialised": """
        arange eye fill full full_like linspace new_full new_ones new_zeros ones ones_like
        scalar_tensor zeros zeros_like""",
    "a metadata assertion the recorder emits; computes nothing": "_assert_tensor_metadata",
}
# Operator (aten base name) -> why the evaluator accepts it. Their in-place `name_` forms are
# accepted too, except for views (an in-place view op rewrites a tensor's sizes: state), and only
# write into storage the same call allocated (harness/graph.py).
ALLOWED: dict[str, str] = {name: why for why, names in _REASONS.items() for name in names.split()}
VIEWS = frozenset(_REASONS["view whose sizes torch derives and checks from its input (reshapes, "
                           "transposes, slices)"].split())
ATTENTION_OPS = frozenset(n for n in ALLOWED if "attention" in n)


class GraphError(ValueError):
    """The graph is malformed or asks for something the evaluator refuses (the message says what)."""


def base_name(name: str) -> str:
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


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


def _arg(node: dict, op, name: str, default):
    names = [a.name for a in op._schema.arguments]
    if name not in names:
        return default
    i = names.index(name)
    return node["args"][i] if i < len(node["args"]) else node["kwargs"].get(name, default)


def check_node(node: dict, op) -> None:
    """Arguments refused whatever their values: attention dropout, the attention's debug mask
    (memory a kernel may leave unwritten: it could hold a previous call's bytes), and an output
    size that a kernel would trust instead of computing (repeat_interleave on a GPU does not check it)."""
    p = _arg(node, op, "dropout_p", 0.0)
    if p != 0 and p != 0.0:
        raise GraphError(f"node {node['name']} ({node['op']}) uses dropout (p={p!r}): the evaluation is deterministic")
    if _arg(node, op, "return_debug_mask", False) is not False:
        raise GraphError(f"node {node['name']} ({node['op']}) asks for the attention's debug mask: refused, its "
                         "memory is not always written")
    if _arg(node, op, "output_size", None) is not None:
        raise GraphError(f"node {node['name']} ({node['op']}) states its own output size: refused, torch "
                         "does not check it on every device")


def storage_id(t: torch.Tensor) -> int:
    """The storage's identity (its StorageImpl), distinct even for empty storages (data_ptr 0)."""
    return t.untyped_storage()._cdata


def within_storage(t: torch.Tensor) -> bool:
    """Every element the tensor's sizes, strides and offset address lies inside its storage."""
    if t.layout != torch.strided or t.is_nested:
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
