"""The trusted re-evaluation, run in its own process by harness/verify.py (never imported by it).

Usage: python -I verify_worker.py SPEC.json   (SPEC: {"dir", "artifact", "out", "batch_size"})

`dir` holds a pristine prepare.py and the committed train.py, written there by the harness. Order
matters, because train.py is untrusted code that we must import to get build_model:

1. load the artifact with torch.load(weights_only=True): tensors and plain data only, no pickle
   code, and read before train.py can touch the file;
2. import prepare.py and snapshot the identity of everything evaluation relies on (prepare's
   functions and their code, torch's loss/activation functions, Tensor and Module methods, time);
3. import train.py as a module (not __main__: main() does not run) and build the model;
4. evaluate with the snapshotted prepare.evaluate_bpb, the model wrapped so it gets a *copy* of
   the input (it cannot write into the batch the targets are sliced from) and returns logits only;
5. a causality probe: changing tokens at positions >= t (or another row of the batch) must not
   change the logits before t;
6. compare the snapshot again: any function replaced during import, build or evaluation fails.

The result is one JSON object written to SPEC["out"].
"""
import hashlib
import json
import math
import os
import sys
import time
import traceback

# Random tokens in the probe batch, and the positions after which they are changed.
PROBE_ROWS = 2
PROBE_SEED = 1234
# Largest tolerated logit change before the cut, relative to the logits' scale (fp32; bf16).
PROBE_RTOL_FP32 = 1e-4
PROBE_RTOL_BF16 = 2e-2


def snapshot(objects):
    """{(owner, name): fingerprint} of what evaluation relies on in the watched objects.

    Functions, classes and modules by identity (and a function's code object); immutable
    constants (EVAL_TOKENS, MAX_SEQ_LEN...) by value. Mutable data (caches a module fills on
    first use) is left out, or honest use would look like tampering.
    """
    import types
    snap = {}
    for label, obj in objects:
        for name, value in list(vars(obj).items()):
            if callable(value) or isinstance(value, types.ModuleType):
                code = getattr(value, "__code__", None)
                snap[(label, name)] = ("obj", id(value), id(code) if code is not None else None)
            elif isinstance(value, (int, float, str, bytes, bool)):
                snap[(label, name)] = ("value", repr(value))
    return snap


def changed(before, after):
    """Names whose fingerprint changed or that vanished (new attributes are lazily loaded modules)."""
    return sorted(f"{owner}.{name}" for (owner, name), fp in before.items() if after.get((owner, name)) != fp)


def main(spec_path):
    spec = json.load(open(spec_path))
    out = {"ok": False, "stage": "start", "timings": {}}
    t0 = time.perf_counter()

    def stage(name):
        out["timings"][out["stage"]] = round(time.perf_counter() - t0, 3)
        out["stage"] = name

    try:
        sys.path.insert(0, spec["dir"])
        import torch
        import torch.nn.functional as F
        stage("load_artifact")
        art = torch.load(spec["artifact"], map_location="cpu", weights_only=True)
        if not isinstance(art, dict) or not {"config", "state_dict", "train_py_sha"} <= set(art):
            raise ValueError("artifact must be a dict with config, state_dict and train_py_sha")
        train_path = f"{spec['dir']}/train.py"
        sha = hashlib.sha256(open(train_path, "rb").read()).hexdigest()
        out["sha_match"] = art["train_py_sha"] == sha
        stage("import_prepare")
        import prepare
        import time as time_mod
        watched = [("prepare", prepare), ("torch", torch), ("torch.nn.functional", F),
                   ("torch.Tensor", torch.Tensor), ("torch.nn.Module", torch.nn.Module),
                   ("time", time_mod), ("math", math)]
        before = snapshot(watched)
        evaluate_bpb, make_tokenizer = prepare.evaluate_bpb, prepare.Tokenizer.from_directory
        stage("import_train")
        import importlib.util
        mod_spec = importlib.util.spec_from_file_location("train", train_path)
        train = importlib.util.module_from_spec(mod_spec)
        sys.modules["train"] = train
        mod_spec.loader.exec_module(train)
        out["patched_at_import"] = changed(before, snapshot(watched))
        stage("build")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if device.type == "cpu":  # same thread policy as train.py: the harness may pin it
            torch.set_num_threads(int(os.environ.get("AUTORESEARCH_THREADS") or os.cpu_count() or 1))
        model = train.build_model(art["config"])
        model.load_state_dict(art["state_dict"], strict=True)
        model.to(device).eval()
        if device.type == "cuda":
            autocast = torch.amp.autocast("cuda", dtype=torch.bfloat16)
            rtol = PROBE_RTOL_BF16
        else:
            import contextlib
            autocast, rtol = contextlib.nullcontext(), PROBE_RTOL_FP32

        class Sealed(torch.nn.Module):
            """The model behind a copy of its input; the output must be logits [B, T, V]."""

            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, idx, *args, **kwargs):
                if args or kwargs:
                    raise RuntimeError("evaluation passed more than the tokens to the model")
                logits = self.inner(idx.clone())
                if not (torch.is_tensor(logits) and logits.dim() == 3 and logits.shape[:2] == idx.shape):
                    raise RuntimeError(f"model must return logits [B, T, V]; got {type(logits).__name__} "
                                       f"{tuple(getattr(logits, 'shape', ()))}")
                return logits

        sealed = Sealed(model)
        stage("evaluate")
        tokenizer = make_tokenizer()
        with torch.no_grad(), autocast:
            out["trusted_bpb"] = float(evaluate_bpb(sealed, tokenizer, int(spec["batch_size"])))
        stage("probe")
        with torch.no_grad(), autocast:
            out["probe"] = causality_probe(torch, sealed, art["config"], prepare, tokenizer, device, rtol)
        out["patched"] = changed(before, snapshot(watched))
        stage("done")
        out["ok"] = True
    except BaseException as e:  # any failure is a verdict, reported with its stage
        out["error"] = f"{type(e).__name__}: {e}"
        out["traceback"] = traceback.format_exc()[-3000:]
    out["timings"]["total"] = round(time.perf_counter() - t0, 3)
    with open(spec["out"], "w") as f:
        json.dump(out, f)


def causality_probe(torch, model, config, prepare, tokenizer, device, rtol):
    """Largest logit change before position t when tokens from t on change, at several t."""
    V = tokenizer.get_vocab_size()
    T = int(min(config.get("sequence_len", prepare.MAX_SEQ_LEN), prepare.MAX_SEQ_LEN))
    g = torch.Generator().manual_seed(PROBE_SEED)
    x = torch.randint(0, V, (PROBE_ROWS, T), generator=g).to(device)
    base = model(x).float()
    scale = max(base.abs().max().item(), 1e-6)
    cuts = sorted({t for t in (1, T // 4, T // 2, (3 * T) // 4, T - 1) if 0 < t < T})
    worst, worst_at = 0.0, None
    for t in cuts:
        x2 = x.clone()
        x2[:, t:] = torch.randint(0, V, (PROBE_ROWS, T - t), generator=g).to(device)
        diff = (model(x2).float()[:, :t] - base[:, :t]).abs().max().item()
        if diff > worst:
            worst, worst_at = diff, t
    x3 = x.clone()
    x3[1:] = torch.randint(0, V, (PROBE_ROWS - 1, T), generator=g).to(device)
    cross = (model(x3).float()[0] - base[0]).abs().max().item()
    limit = rtol * scale
    return {"seq_len": T, "cuts": cuts, "max_future_leak": worst, "at": worst_at,
            "max_cross_row_leak": cross, "limit": limit, "scale": scale,
            "causal": worst <= limit and cross <= limit}


if __name__ == "__main__":
    main(sys.argv[1])
