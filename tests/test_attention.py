"""Every attention backend that runs on CPU (attention.py) agrees with a float64 reference written
out here; the probe and cascade; the dtypes train.py's model hands to attention."""

import math

import pytest
import torch

import attention as attn
import train
from search import knobs

CPU = torch.device("cpu")
CPU_BACKENDS = ["sdpa", "naive", "flex"]  # fa3 needs CUDA; gpu_check.py covers it on a device
TRAINABLE_ON_CPU = {"sdpa", "naive"}  # torch has no flex_attention backward on CPU (it raises)
CASES = [  # (name, heads, kv heads, window)
    ("full causal", 4, 4, -1),
    ("sliding window", 4, 4, 5),
    ("window of one", 4, 4, 0),
    ("GQA full", 4, 2, -1),
    ("GQA window", 6, 2, 3),
    ("MQA window", 4, 1, 7),
]
T, D, B = 16, 8, 2


def reference(q, k, v, window):
    """Loop-level float64 attention: query i attends keys j with j <= i and i - j <= window."""
    q, k, v = q.double(), k.double(), v.double()
    Bq, Tq, H, Dq = q.shape
    group = H // k.size(2)
    out = torch.zeros_like(q)
    for b in range(Bq):
        for h in range(H):
            kh, vh = k[b, :, h // group], v[b, :, h // group]
            for i in range(Tq):
                lo = 0 if window < 0 else max(0, i - window)
                scores = kh[lo:i + 1] @ q[b, i, h] / math.sqrt(Dq)
                out[b, i, h] = torch.softmax(scores, dim=0) @ vh[lo:i + 1]
    return out


def inputs(h, hkv, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, T, n, D, generator=g).requires_grad_() for n in (h, hkv, hkv)]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name,h,hkv,window", CASES)
def test_backend_matches_reference(backend, name, h, hkv, window):
    q, k, v = inputs(h, hkv)
    if backend not in TRAINABLE_ON_CPU:
        q, k, v = (t.detach() for t in (q, k, v))
    attn.set_backend(backend, T, [window], CPU)
    try:
        out = attn.attention(q, k, v, window)
    finally:
        attn.set_backend("sdpa")
    ref_inputs = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = reference(*ref_inputs, window)
    assert out.shape == (B, T, h, D)
    assert (out.double() - ref).abs().max().item() < 1e-5, f"{backend} forward differs on {name}"
    if backend not in TRAINABLE_ON_CPU:
        return
    # gradients too: training runs the backward of whichever backend was picked
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * weight).sum().backward()
    (ref * weight.double()).sum().backward()
    for got, want, what in zip((q, k, v), ref_inputs, "qkv"):
        assert (got.grad.double() - want.grad).abs().max().item() < 1e-4, f"{backend} d{what} differs on {name}"


def test_reference_itself_is_causal_and_windowed():
    q, k, v = inputs(2, 2)
    full, win = reference(q, k, v, -1), reference(q, k, v, 2)
    assert torch.allclose(full[:, :3], win[:, :3])  # the first three queries see the same keys
    assert not torch.allclose(full[:, 3:], win[:, 3:])  # later ones lose keys to the window
    v2 = v.detach().clone()
    v2[:, -1] += 100.0  # changing the last value changes only the last query (causality)
    assert torch.allclose(reference(q, k, v2, -1)[:, :-1], full[:, :-1])


def test_layer_windows_follow_the_pattern_and_end_long():
    cfg = train.model_config(512, 64)
    cfg.update(n_layer=6, window_pattern="SSL", short_window_frac=0.25)
    assert train.layer_windows(cfg) == [16, 16, -1, 16, 16, -1]
    cfg.update(n_layer=3, window_pattern="S")
    assert train.layer_windows(cfg) == [16, 16, -1]  # the last layer always sees everything


def test_probe_picks_sdpa_on_cpu_and_honours_forcing(monkeypatch, capsys):
    import contextlib
    args = (CPU, contextlib.nullcontext(), 4, 2, 8, T, [5, -1], False)
    monkeypatch.delenv("AUTORESEARCH_ATTN", raising=False)
    assert attn.probe_attention(*args) == "sdpa"
    monkeypatch.setenv("AUTORESEARCH_ATTN", "naive")
    assert attn.probe_attention(*args) == "naive"
    assert attn._backend is attn.attn_naive
    monkeypatch.setenv("AUTORESEARCH_ATTN", "fa3")  # no CUDA here: rejected with the reason printed
    with pytest.raises(RuntimeError, match="no attention backend"):
        attn.probe_attention(*args)
    assert "fa3 rejected" in capsys.readouterr().out
    attn.set_backend("sdpa")


# --- device keys, dtypes the model really feeds, the probe fed those dtypes ---------

BF16_AUTOCAST_CPU = dict(device_type="cpu", dtype=torch.bfloat16)


def test_device_key_fills_in_the_index():
    """Masks were stored under str(device) ("cuda") and looked up under str(q.device) ("cuda:0")."""
    assert attn.device_key("cuda") == attn.device_key("cuda:0") == attn.device_key(torch.device("cuda", 0))
    assert attn.device_key("cpu") == attn.device_key(torch.device("cpu", 0)) == ("cpu", 0)
    assert attn.device_key("cuda:1") != attn.device_key("cuda:0")


def test_flex_masks_built_for_an_indexed_device_are_found():
    """Masks prepared for torch.device("cpu", 0) serve tensors whose device prints as "cpu"."""
    q, k, v = (t.detach() for t in inputs(4, 2))
    attn.set_backend("flex", T, [5], torch.device("cpu", 0))
    try:
        out = attn.attention(q, k, v, 5)
    finally:
        attn.set_backend("sdpa")
    assert (out.double() - reference(q, k, v, 5)).abs().max().item() < 1e-5


MODULES = {}


def tiny_model(profile="tiny"):
    """train.py's model at the profile's knob values (gpu: train.py's own, two layers for speed)."""
    if profile not in MODULES:
        MODULES[profile] = knobs.load_train(profile, name=f"train_{profile}")
        if profile == "gpu":
            MODULES[profile].DEPTH = 2
    torch.manual_seed(0)
    mod = MODULES[profile]
    return mod.build_model(mod.model_config(512, 64))


@pytest.mark.parametrize("profile", ["tiny", "gpu"])
def test_the_model_feeds_attention_one_dtype_under_autocast(profile):
    """Value-embedding layers mixed an fp32 ve into a bf16 v: attention got (bf16, bf16, fp32)."""
    model = tiny_model(profile)
    assert any(train.has_value_embedding(i, model.cfg["n_layer"]) for i in range(model.cfg["n_layer"]))
    dtypes = attn.model_attention_dtypes(model, torch.amp.autocast(**BF16_AUTOCAST_CPU), CPU)
    assert dtypes == [(torch.bfloat16,) * 3]
    import contextlib
    assert attn.model_attention_dtypes(tiny_model(), contextlib.nullcontext(), CPU) == [(torch.float32,) * 3]
    assert attn._backend is attn.attn_sdpa  # the recording backend is put back


def test_gpu_recipe_keeps_embeddings_and_residual_in_bf16():
    """The reference stores token and value embeddings in bf16, so its residual stream is bf16."""
    model = tiny_model("gpu")
    assert model.cfg["embed_dtype"] == "bfloat16" and "embed_dtype" not in tiny_model().cfg
    assert model.wte.weight.dtype == torch.bfloat16
    assert {v.weight.dtype for v in model.value_embeds.values()} == {torch.bfloat16}
    assert model.lm_head.weight.dtype == torch.float32  # the rest stays fp32 under autocast
    residual = []
    handle = model.blocks[0].register_forward_hook(lambda mod, args, out: residual.append(out.dtype))
    with torch.amp.autocast(**BF16_AUTOCAST_CPU):
        logits = model(torch.zeros(1, 8, dtype=torch.long))
    handle.remove()
    assert residual == [torch.bfloat16] and logits.dtype == torch.float32


def strict_backend(seen):
    """A backend that, like compiled flex or FA, refuses mixed input dtypes; records what it got."""
    def attend(q, k, v, window):
        seen.append((q.dtype, k.dtype, v.dtype))
        if not q.dtype == k.dtype == v.dtype:
            raise RuntimeError(f"mixed dtypes {q.dtype} {k.dtype} {v.dtype}")
        return attn.attn_sdpa(q, k, v, window)
    return attend


def test_probe_feeds_the_dtypes_the_model_produces(monkeypatch, capsys):
    seen = []
    monkeypatch.setitem(attn.BACKENDS, "strict", strict_backend(seen))
    monkeypatch.setenv("AUTORESEARCH_ATTN", "strict")
    autocast = torch.amp.autocast(**BF16_AUTOCAST_CPU)
    model = tiny_model()
    cfg = model.cfg
    args = (CPU, autocast, cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"], T, [5, -1], False)
    try:
        dtypes = attn.model_attention_dtypes(model, autocast, CPU)
        assert attn.probe_attention(*args, dtypes) == "strict"
        assert set(seen) == {(torch.bfloat16,) * 3}
        # the mix the model used to produce is fed as given, and a strict backend is rejected for it
        with pytest.raises(RuntimeError, match="no attention backend"):
            attn.probe_attention(*args, [(torch.bfloat16, torch.bfloat16, torch.float32)])
        assert "strict rejected: RuntimeError: mixed dtypes" in capsys.readouterr().out
    finally:
        attn.set_backend("sdpa")


def test_the_cascade_skips_fa3_on_sm12x_with_the_reason(monkeypatch, capsys):
    assert attn.cascade(None) == (["sdpa", "naive"], {})
    assert attn.cascade((9, 0))[0] == ["fa3", "flex", "sdpa"]
    names, skipped = attn.cascade((12, 1))  # GB10
    assert names == ["flex", "sdpa"] and "sm_121" in skipped["fa3"] and "no FA3 build" in skipped["fa3"]
    monkeypatch.setenv("AUTORESEARCH_ATTN", "fa3")
    assert attn.attention_candidates(CPU) == (["fa3"], {})


def test_a_backend_that_fails_only_under_compile_runs_eagerly(monkeypatch, capsys):
    """No backend compiles (CXX=/bin/false: inductor cannot build its CPU code): the probe keeps
    the first backend that works eagerly, says so loudly and notes it for the summary."""
    import contextlib
    monkeypatch.setenv("CXX", "/bin/false")
    monkeypatch.delenv("AUTORESEARCH_ATTN", raising=False)
    import torch._inductor.config as inductor_config
    monkeypatch.setattr(inductor_config.cpp, "cxx", (None, "/bin/false"))
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)  # a cached kernel would need no compiler
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    monkeypatch.setattr(attn, "COMPILE_NOTES", [])
    torch._dynamo.reset()
    try:
        assert attn.probe_attention(CPU, contextlib.nullcontext(), 2, 2, 8, T, [5, -1], True) == "sdpa"
    finally:
        torch._dynamo.reset()
        attn.set_backend("sdpa")
    out = capsys.readouterr().out
    assert "sdpa rejected under compile: InductorError" in out and "sdpa runs eagerly" in out
    assert attn.COMPILE_NOTES == ["attention: no backend compiles, sdpa eager"]
