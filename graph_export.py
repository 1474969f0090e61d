"""
Fixed model-graph plumbing for autoresearch, beside runtime.py (which re-exports what train.py
calls: save_model, and record_graph, ExportError, GRAPH_FORMAT, EVAL_BATCH_ENV). The research loop
never edits this file (the guard lets only train.py change); in loop mode train.py must save its
model with save_model, the only way its model reaches the trusted evaluation.

    the format      GRAPH_FORMAT ("autoresearch-graph/1", docs/contracts.md): JSON with the input's
                    shape, one node per operator call in execution order {"op":
                    "aten.<name>.<overload>", "args", "kwargs"}, and the output. An argument is a
                    literal (number, bool, string, null, list), a reference {"ref": name[, "index":
                    i]} to the input ("input"), a weight ("w:<state_dict key>"), a constant
                    ("c:<name>") or an earlier node ("n<k>"), or a typed literal {"dtype" | "device"
                    | "layout" | "memory_format" | "float": ...}
    the recorder    record_graph(): every aten call of one eager forward pass, in order (_Recorder,
                    a TorchDispatchMode that names tensors by identity)
    the artifact    save_model(): the weights plus the graph recorded at the evaluation's shape
                    [eval_batch(), seq_len] with plain aten attention; the evaluator
                    (harness/eval_worker.py) replays that graph without running any of train.py
"""

import json
import math
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

import attention as attn  # the fixed attention plumbing beside this file: plain_aten()

GRAPH_FORMAT = "autoresearch-graph/1"
# Rows of the evaluation batch the graph is recorded for (the harness sets it; the evaluator
# checks it): the trusted evaluation reads the same tokens whatever train.py's batch is.
EVAL_BATCH_ENV = "AUTORESEARCH_EVAL_BATCH"
DEFAULT_EVAL_BATCH = 8


class ExportError(RuntimeError):
    """The model could not be recorded as a graph of aten operators (the message says why)."""


def eval_batch():
    return int(os.environ.get(EVAL_BATCH_ENV) or DEFAULT_EVAL_BATCH)


def _enum(value):
    return str(value).split(".")[-1]


class _Recorder(TorchDispatchMode):
    """Records every aten call of one forward pass; tensors are named by identity."""

    def __init__(self, names):
        super().__init__()
        self.names = WeakIdKeyDictionary()
        for t, ref in names:
            self.names[t] = ref
        self.nodes, self.constants = [], {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        enc_args = [self._encode(a) for a in args]
        enc_kwargs = {k: self._encode(v) for k, v in kwargs.items()}
        out = func(*args, **kwargs)
        schema = getattr(func, "_schema", None)
        if schema is None:
            raise ExportError(f"{func} is not an operator the evaluator can replay")
        name = f"n{len(self.nodes)}"
        ns, op = schema.name.split("::", 1)
        self.nodes.append({"name": name, "op": f"{ns}.{op}.{func._overloadname}",
                           "args": enc_args, "kwargs": enc_kwargs})
        self._bind(out, name)
        return out

    def _bind(self, out, name):
        if isinstance(out, torch.Tensor):
            self.names[out] = {"ref": name}
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    self.names[o] = {"ref": name, "index": i}

    def _encode(self, v):
        if isinstance(v, torch.Tensor):
            ref = self.names.get(v)
            if ref is None:                   # a tensor made outside the recorded ops: data
                key = f"c:{len(self.constants)}"
                self.constants[key] = v.detach().clone().cpu()
                ref = self.names[v] = {"ref": key}
            return dict(ref)
        if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, (list, tuple, torch.Size)):
            return [self._encode(x) for x in v]
        if isinstance(v, torch.dtype):
            return {"dtype": _enum(v)}
        if isinstance(v, torch.device):
            return {"device": v.type}
        if isinstance(v, torch.layout):
            return {"layout": _enum(v)}
        if isinstance(v, torch.memory_format):
            return {"memory_format": _enum(v)}
        raise ExportError(f"cannot record an argument of type {type(v).__name__}")


@torch.no_grad()
def record_graph(model, tokens, autocast=None):
    """(graph dict, constants) of model(tokens): every aten call of the forward pass, in order.
    Run the eager model (a torch.compile'd forward is not made of aten calls the recorder sees)."""
    names = [(tokens, {"ref": "input"})]
    names += [(t, {"ref": f"w:{k}"}) for k, t in model.state_dict(keep_vars=True).items()]
    buffers = {k: b for k, b in model.named_buffers() if k not in model.state_dict()}
    names += [(t, {"ref": f"c:buffer:{k}"}) for k, t in buffers.items()]
    rec = _Recorder(names)
    rec.constants.update({f"c:buffer:{k}": b.detach().clone().cpu() for k, b in buffers.items()})
    with rec:
        if autocast is not None:
            with autocast:
                out = model(tokens)
        else:
            out = model(tokens)
    ref = rec.names.get(out) if isinstance(out, torch.Tensor) else None
    if ref is None or not ref["ref"].startswith("n"):
        raise ExportError("the model's output was not computed by the recorded operators "
                          "(was the forward compiled?)")
    graph = {"format": GRAPH_FORMAT, "device": tokens.device.type,
             "input": {"shape": list(tokens.shape), "dtype": _enum(tokens.dtype)},
             "nodes": rec.nodes, "output": ref}
    return graph, rec.constants


def save_model(model, path, config, sha, vocab_size, seq_len, autocast=None):
    """Save {"config", "state_dict", "train_py_sha", "graph", "constants"} at `path` (atomically):
    the weights for the inference tools and the recorded graph for the trusted evaluator. The
    graph is recorded at the evaluation's shape [eval_batch(), seq_len] on the model's device."""
    device = next(model.parameters()).device
    tokens = torch.randint(0, vocab_size, (eval_batch(), seq_len), device=device)
    was_training = model.training
    model.eval()
    try:
        with attn.plain_aten():   # plain aten attention: the evaluator replays nothing else
            graph, constants = record_graph(model, tokens, autocast)
    finally:
        model.train(was_training)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    art = {"config": config, "state_dict": state, "train_py_sha": sha,
           "graph": json.dumps(graph, separators=(",", ":")), "constants": constants}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(art, tmp)
    os.replace(tmp, path)
