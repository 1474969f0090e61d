"""
Pretraining script: one GPT, one device, one fixed budget. The research loop edits this file.

Read top to bottom: the knobs, the attention backends, the model, the optimizer, the schedule,
then main(), which trains for prepare.TIME_BUDGET seconds (or AUTORESEARCH_STEPS steps),
evaluates with prepare.evaluate_bpb and prints the summary block of docs/contracts.md. In the
research loop (prepare.SEALED) it runs in a sandbox without validation data: it saves the model
and the harness evaluates it; every step prints a `step N | ...` line, by which the harness times
the training itself.
Usage: uv run train.py
"""

import contextlib
import gc
import glob
import hashlib
import inspect
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import prepare
import runtime

# ---------------------------------------------------------------------------------------------
# Hyperparameters. One literal per line: the offline proposer and Hyperband rewrite these lines.
# Values are sized for the cpu profile; the gpu profile scales the size knobs (see below), so an
# edit here takes effect on every profile.
# ---------------------------------------------------------------------------------------------

# Model shape
DEPTH = 4  # transformer layers
ASPECT_RATIO = 32  # model_dim = depth * ASPECT_RATIO, rounded to a multiple of HEAD_DIM
HEAD_DIM = 64  # width of one attention head
KV_HEAD_RATIO = 1  # query heads per key/value head (GQA); 1 = plain multi-head attention
WINDOW_PATTERN = "SSSL"  # per-layer attention span, repeated: L = full context, S = short window
SHORT_WINDOW_FRAC = 0.5  # an S layer sees this fraction of the context
LOGIT_SOFTCAP = 15.0  # logits = cap * tanh(logits / cap): keeps early logits from running away

# Batch
DEVICE_BATCH_SIZE = 8  # sequences per forward/backward
TOTAL_BATCH_SIZE = 2048  # tokens per optimizer step (gradient accumulation makes up the rest)

# Optimization
MATRIX_LR = 0.02  # Muon learning rate for the 2-D weights inside the blocks
EMBEDDING_LR = 0.3  # AdamW learning rate for token and value embeddings
UNEMBEDDING_LR = 0.004  # AdamW learning rate for the output head
SCALAR_LR = 0.5  # AdamW learning rate for the per-layer residual scalars
WEIGHT_DECAY = 0.0  # decoupled weight decay on the Muon weights
ADAM_BETA1 = 0.8  # AdamW first-moment decay (short memory: embeddings move fast)
ADAM_BETA2 = 0.95  # AdamW second-moment decay
MUON_MOMENTUM = 0.95  # Muon Nesterov momentum (ramped up from 0.85 over the first 300 steps)
GRAD_CLIP = 1.0  # clip the global gradient norm to this; 0 disables
MUON_VARIANT = "classic"  # classic | reference: Newton-Schulz + plain decay, or karpathy/autoresearch's Polar Express + NorMuon + cautious faded decay
WARMUP_RATIO = 0.0  # fraction of the budget spent warming the LR up
WARMDOWN_RATIO = 0.5  # fraction of the budget spent cooling the LR down (WSD schedule)
FINAL_LR_FRAC = 0.0  # LR at the end of the cool-down, as a fraction of the peak
SEED = 42  # initialisation seed (AUTORESEARCH_SEED overrides it)

# Runtime (measured with scripts/bench_cpu.py; see docs)
COMPILE_CPU = False  # torch.compile on CPU: 1.4x tok/s on the idle 2-core bench, but ~30 s cold compile per run and a C++ toolchain
CPU_BF16 = False  # bfloat16 autocast on CPU: 11x slower than float32 on the bench CPU (no bf16 units)
CPU_THREADS = 0  # torch threads on CPU, 0 = all cores: 2 threads gave 1.7x the tok/s of 1 on the idle bench
STARTUP_STEPS = 3  # first steps not counted as training time (compile, allocator warm-up)
EXPLODE_FACTOR = 3.0  # fast-fail when the loss exceeds this times ln(vocab): diverged
FA3_REPO = "kernels-community/flash-attn3"  # FlashAttention-3 build on the kernels hub
FA3_KERNEL_VERSION = 1  # pinned major version (kernels >= 0.15 refuses to load without one)

# Profile scaling: the gpu profile multiplies the cpu-sized knobs above.
GPU_DEPTH_MULT = 2  # 4 -> 8 layers, the reference depth
GPU_WIDTH_MULT = 2  # model_dim 128 -> 512 at depth 8 (the reference width)
GPU_BATCH_MULT = 16  # sequences per forward/backward: 8 -> 128
GPU_TOTAL_BATCH_MULT = 256  # tokens per step: 2048 -> 524288, the reference
GPU_STARTUP_STEPS = 10  # compile and autotune happen in the first steps on GPU
# The gpu profile's baseline is the reference recipe (karpathy/autoresearch); docs/gpu.md lists
# what matches and what differs. Multipliers and offsets, so an edit above still reaches the gpu.
GPU_HEAD_DIM_MULT = 2  # head width 64 -> 128: 4 heads of 128 at width 512, the reference
GPU_MATRIX_LR_MULT = 2.0  # Muon LR 0.02 -> 0.04, the reference
GPU_EMBEDDING_LR_MULT = 2.0  # embedding LR 0.3 -> 0.6, the reference
GPU_WEIGHT_DECAY_ADD = 0.2  # Muon weight decay 0.0 -> 0.2, the reference
GPU_MUON_VARIANT = "reference"  # the reference's Muon on gpu (MUON_VARIANT is the cpu/tiny one)
GPU_BF16_EMBEDDINGS = True  # token/value embeddings stored in bf16, so the residual stream is bf16, as the reference
GPU_GRAD_CLIP = 0.0  # the reference does not clip gradients


def effective_knobs(profile):
    """The knobs in force for a profile. Only `gpu` is changed; cpu and tiny use them as is."""
    knobs = dict(depth=DEPTH, aspect=ASPECT_RATIO, rows=DEVICE_BATCH_SIZE, total=TOTAL_BATCH_SIZE,
                 startup=STARTUP_STEPS, head_dim=HEAD_DIM, matrix_lr=MATRIX_LR, embedding_lr=EMBEDDING_LR,
                 weight_decay=WEIGHT_DECAY, muon_variant=MUON_VARIANT, bf16_embeddings=False,
                 grad_clip=GRAD_CLIP)
    if profile == "gpu":
        knobs.update(depth=DEPTH * GPU_DEPTH_MULT, aspect=ASPECT_RATIO * GPU_WIDTH_MULT,
                     rows=DEVICE_BATCH_SIZE * GPU_BATCH_MULT,
                     total=TOTAL_BATCH_SIZE * GPU_TOTAL_BATCH_MULT, startup=GPU_STARTUP_STEPS,
                     head_dim=HEAD_DIM * GPU_HEAD_DIM_MULT, matrix_lr=MATRIX_LR * GPU_MATRIX_LR_MULT,
                     embedding_lr=EMBEDDING_LR * GPU_EMBEDDING_LR_MULT,
                     weight_decay=WEIGHT_DECAY + GPU_WEIGHT_DECAY_ADD, muon_variant=GPU_MUON_VARIANT,
                     bf16_embeddings=GPU_BF16_EMBEDDINGS, grad_clip=GPU_GRAD_CLIP)
    return knobs


# ---------------------------------------------------------------------------------------------
# Attention backends. All take q [B,T,H,D], k and v [B,T,Hkv,D] (Hkv divides H: GQA) and a
# window w: query i sees keys j with 0 <= i-j <= w; w < 0 means the full causal context.
# ---------------------------------------------------------------------------------------------


def window_mask(T, window, device):
    """Boolean [T,T] mask, True where attention is allowed. Built inline so torch.compile traces it."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    allowed = j <= i
    if 0 <= window < T - 1:
        allowed = allowed & (i - j <= window)
    return allowed


def attn_naive(q, k, v, window):
    """Written-out softmax attention: the slow path that works everywhere, and the test reference."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    rep = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
    scores = scores.masked_fill(~window_mask(q.size(2), window, q.device), float("-inf"))
    y = scores.float().softmax(dim=-1).to(v.dtype) @ v
    return y.transpose(1, 2)


def attn_sdpa(q, k, v, window):
    """PyTorch SDPA; sliding windows need an explicit mask (which rules out the flash kernels)."""
    T = q.size(1)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    gqa = q.size(1) != k.size(1)
    if window < 0 or window >= T - 1:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    else:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(T, window, q.device),
                                           enable_gqa=gqa)
    return y.transpose(1, 2)


_flex_masks = {}  # (T, window, device_key) -> BlockMask, built before training by prepare_backend()


def device_key(device):
    """(type, index) with the index filled in: "cuda", "cuda:0" and torch.device("cuda", 0) agree."""
    d = torch.device(device)
    index = d.index
    if index is None:
        index = torch.cuda.current_device() if d.type == "cuda" and torch.cuda.is_available() else 0
    return d.type, index


def attn_flex(q, k, v, window):
    """flex_attention with block-sparse masks: skips whole blocks outside the window (fast under compile)."""
    from torch.nn.attention.flex_attention import flex_attention
    block_mask = _flex_masks[(q.size(1), window, device_key(q.device))]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    y = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=q.size(1) != k.size(1))
    return y.transpose(1, 2)


_fa3 = None  # the FlashAttention-3 module, loaded by load_fa3()


def attn_fa3(q, k, v, window):
    """FlashAttention-3 (Hopper) from the kernels hub: native windows and GQA, bf16 only."""
    dtype = q.dtype
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    out = _fa3.flash_attn_func(q, k, v, causal=True, window_size=(window, 0) if window >= 0 else (-1, -1))
    if isinstance(out, tuple):  # some builds also return the log-sum-exp
        out = out[0]
    return out.to(dtype)


ATTENTION_BACKENDS = {"fa3": attn_fa3, "flex": attn_flex, "sdpa": attn_sdpa, "naive": attn_naive}
_attention = attn_sdpa  # the backend in force; main() picks one with probe_attention()


def attend(q, k, v, window):
    return _attention(q, k, v, window)


FA3_HUB_CHECK_SECONDS = 3.0  # the hub must answer a DNS lookup and a TCP connect within this, else offline


def hub_unreachable_reason(endpoint=None, deadline=FA3_HUB_CHECK_SECONDS):
    """None when the HF hub accepts a TCP connection within `deadline` seconds, else why not.
    DNS runs in a thread (getaddrinfo ignores socket timeouts), so a dropped packet costs seconds."""
    import socket
    import threading
    from urllib.parse import urlparse
    url = urlparse(endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname, url.port or (80 if url.scheme == "http" else 443)
    found = {}

    def resolve():
        try:
            found["addr"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4]
        except OSError as e:
            found["error"] = e
    t0 = time.monotonic()
    thread = threading.Thread(target=resolve, daemon=True)
    thread.start()
    thread.join(deadline)
    if "addr" not in found:
        return f"cannot resolve {host}: {found.get('error', 'timed out')}"
    try:
        socket.create_connection(found["addr"][:2], timeout=max(0.1, deadline - (time.monotonic() - t0))).close()
    except OSError as e:
        return f"cannot connect to {host}:{port}: {e}"
    return None


def go_offline_if_hub_unreachable():
    """Set HF_HUB_OFFLINE=1 when the hub cannot be reached, so a kernels load uses the local cache
    and fails at once instead of retrying for minutes. Already set: no network is tried at all."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        reason = "HF_HUB_OFFLINE is set"
    else:
        reason = hub_unreachable_reason()
        if reason is None:
            return None
        os.environ["HF_HUB_OFFLINE"] = "1"
        print(f"attention: HF hub unreachable ({reason}): HF_HUB_OFFLINE=1, FA3 only from the local cache")
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported earlier: it read the variable at import, so tell it too
        constants.HF_HUB_OFFLINE = True
    return reason


def load_fa3():
    """Load FA3 through `kernels`: pinned version, and trust granted to this one repository only."""
    global _fa3
    if _fa3 is not None:
        return
    go_offline_if_hub_unreachable()
    from kernels import get_kernel
    params = inspect.signature(get_kernel).parameters
    kwargs = {"version": FA3_KERNEL_VERSION} if "version" in params else {}
    if "trust_remote_code" in params:
        kwargs["trust_remote_code"] = [FA3_REPO]
    try:
        module = get_kernel(FA3_REPO, **kwargs)
    except TypeError:  # a kernels release that takes trust_remote_code only as a bool
        kwargs["trust_remote_code"] = True
        module = get_kernel(FA3_REPO, **kwargs)
    _fa3 = module if hasattr(module, "flash_attn_func") else module.flash_attn_interface


def prepare_backend(name, T, windows, device):
    """Whatever a backend needs before its first call (downloads, block masks); raises if unusable."""
    if name == "fa3":
        if device.type != "cuda":
            raise RuntimeError("FA3 needs a CUDA device")
        load_fa3()
    elif name == "flex":
        from torch.nn.attention.flex_attention import create_block_mask
        for w in set(windows):
            def mask_mod(b, h, qi, kj, w=w):
                return (kj <= qi) & ((qi - kj <= w) if w >= 0 else (kj >= 0))
            _flex_masks[(T, w, device_key(device))] = create_block_mask(mask_mod, None, None, T, T,
                                                                         device=str(device))
    elif name not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; known: {', '.join(ATTENTION_BACKENDS)}")


def set_attention_backend(name, T=None, windows=(), device=torch.device("cpu")):
    global _attention
    if T is not None:
        prepare_backend(name, T, windows, device)
    _attention = ATTENTION_BACKENDS[name]


def attention_candidates(device):
    """The cascade, best first. AUTORESEARCH_ATTN forces one backend (tests, benchmarks)."""
    forced = os.environ.get("AUTORESEARCH_ATTN")
    if forced:
        return [forced]
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        if major == 12:  # Blackwell sm_12x (GB10, RTX 50xx): no FA3 build; FA3+compile breaks there
            return ["flex", "sdpa"]
        return ["fa3", "flex", "sdpa"]  # kernels' arch check refuses FA3 where no build exists
    return ["sdpa", "naive"]


def model_attention_dtypes(model, autocast, device, tokens=16):
    """The (q, k, v) dtypes each layer of `model` hands to attention under `autocast`: one short
    forward with a recording backend in place, so the probe feeds what training will feed."""
    global _attention
    seen, previous = set(), _attention

    def record(q, k, v, window):
        seen.add((q.dtype, k.dtype, v.dtype))
        return torch.zeros_like(q)
    idx = torch.zeros(1, min(tokens, model.cfg["sequence_len"]), dtype=torch.long, device=device)
    _attention = record
    try:
        with torch.no_grad(), autocast:
            model(idx)
    finally:
        _attention = previous
    return sorted(seen, key=str)


def probe_attention(device, autocast, n_head, n_kv_head, head_dim, T, windows, compile_on,
                    dtypes=((torch.float32,) * 3,)):
    """Pick the first backend that runs forward+backward (compiled if compile is on) on inputs of
    each (q, k, v) dtype triple in `dtypes` (the model's: model_attention_dtypes) and agrees with
    the float64 reference; print why each rejected one failed."""
    for name in attention_candidates(device):
        try:
            set_attention_backend(name, T, windows, device)
            fn = torch.compile(attend, dynamic=False) if compile_on else attend
            for dts in dtypes:
                check_attention(fn, device, autocast, n_head, n_kv_head, head_dim, T, windows, dts)
            set_attention_backend(name)
            return name
        except Exception as e:  # any failure means: try the next backend
            print(f"attention: {name} rejected: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    raise RuntimeError("no attention backend works on this device")


def check_attention(fn, device, autocast, n_head, n_kv_head, head_dim, T, windows, dtypes, batch=1,
                    tolerance=5e-2):
    """Run fn forward+backward on q, k, v of the given dtypes for every window; return the worst
    error against the float64 reference; raise when it is not below `tolerance` (bf16 inputs)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    shapes = (n_head, n_kv_head, n_kv_head)
    q, k, v = (torch.randn(batch, T, h, head_dim, generator=g).to(device, dt).requires_grad_()
               for h, dt in zip(shapes, dtypes))
    worst = 0.0
    for w in sorted(set(windows)):
        with autocast:
            out = fn(q, k, v, w)
        out.float().square().sum().backward()
        ref = attn_naive(q.detach().double(), k.detach().double(), v.detach().double(), w)
        err = (out.detach().double() - ref).abs().max().item()
        if not err < tolerance:
            raise RuntimeError(f"window {w}: max error {err:.3g} against the reference")
        worst = max(worst, err)
    return worst


# ---------------------------------------------------------------------------------------------
# Model: a nanochat-style GPT.
# ---------------------------------------------------------------------------------------------

VE_GATE_CHANNELS = 32  # the value-embedding gate reads this many leading channels of the input


def norm(x):
    return F.rms_norm(x, (x.size(-1),))  # RMSNorm without a learned gain


def has_value_embedding(layer, n_layer):
    return layer % 2 == (n_layer - 1) % 2  # alternating layers, always including the last


def apply_rotary(x, cos, sin):
    d = x.size(-1) // 2
    x1, x2 = x[..., :d], x[..., d:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"]
        dim = cfg["n_embd"]
        self.c_q = nn.Linear(dim, self.n_head * self.head_dim, bias=False)
        self.c_k = nn.Linear(dim, self.n_kv_head * self.head_dim, bias=False)
        self.c_v = nn.Linear(dim, self.n_kv_head * self.head_dim, bias=False)
        self.c_proj = nn.Linear(self.n_head * self.head_dim, dim, bias=False)
        use_ve = has_value_embedding(layer, cfg["n_layer"])
        self.ve_gate = nn.Linear(VE_GATE_CHANNELS, self.n_kv_head, bias=False) if use_ve else None

    def forward(self, x, ve, cos, sin, window):
        B, T, _ = x.shape
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.n_kv_head, self.head_dim)
        v = self.c_v(x).view(B, T, self.n_kv_head, self.head_dim)
        if ve is not None:  # value residual: mix a per-token embedding into v, gated per head
            gate = 2 * torch.sigmoid(self.ve_gate(x[..., :VE_GATE_CHANNELS]))
            v = v + gate.unsqueeze(-1) * ve.view(B, T, self.n_kv_head, self.head_dim)
        q, k = norm(apply_rotary(q, cos, sin)), norm(apply_rotary(k, cos, sin))  # QK-norm
        y = attend(q, k, v.to(q.dtype), window)  # one dtype in: v is fp32 where ve was mixed in
        return self.c_proj(y.reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim, bias=False)
        self.c_proj = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())  # relu^2


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.attn = Attention(cfg, layer)
        self.mlp = MLP(cfg["n_embd"])

    def forward(self, x, ve, cos, sin, window):
        x = x + self.attn(norm(x), ve, cos, sin, window)
        return x + self.mlp(norm(x))


def layer_windows(cfg):
    """Window per layer from the pattern; the last layer always sees the full context."""
    T, pattern = cfg["sequence_len"], cfg["window_pattern"].upper()
    assert pattern and set(pattern) <= {"S", "L"}, f"WINDOW_PATTERN must use S and L: {pattern!r}"
    short = max(1, int(T * cfg["short_window_frac"]))
    windows = [short if pattern[i % len(pattern)] == "S" else -1 for i in range(cfg["n_layer"])]
    windows[-1] = -1
    return windows


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = dict(cfg)
        V, dim, L = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"]
        self.windows = layer_windows(cfg)
        self.wte = nn.Embedding(V, dim)
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(L)])
        self.lm_head = nn.Linear(dim, V, bias=False)
        self.resid_lambdas = nn.Parameter(torch.ones(L))  # per-layer scale of the residual stream
        self.x0_lambdas = nn.Parameter(torch.zeros(L))  # per-layer mix-in of the first embedding
        kv_dim = cfg["n_kv_head"] * cfg["head_dim"]
        self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(V, kv_dim)
                                           for i in range(L) if has_value_embedding(i, L)})
        inv_freq = 1.0 / (10000 ** (torch.arange(0, cfg["head_dim"], 2).float() / cfg["head_dim"]))
        freqs = torch.outer(torch.arange(cfg["sequence_len"]).float(), inv_freq)
        self.register_buffer("cos", freqs.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", freqs.sin()[None, :, None, :], persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        s = 3 ** 0.5 * self.cfg["n_embd"] ** -0.5  # uniform bound with std 1/sqrt(dim)
        nn.init.normal_(self.wte.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=0.001)  # near-uniform predictions at the start
        for block in self.blocks:
            for lin in (block.attn.c_q, block.attn.c_k, block.attn.c_v, block.mlp.c_fc):
                nn.init.uniform_(lin.weight, -s, s)
            nn.init.zeros_(block.attn.c_proj.weight)  # each block starts as the identity
            nn.init.zeros_(block.mlp.c_proj.weight)
            if block.attn.ve_gate is not None:
                nn.init.zeros_(block.attn.ve_gate.weight)  # gate 2*sigmoid(0) = 1: neutral
        for ve in self.value_embeds.values():
            nn.init.uniform_(ve.weight, -s, s)
        self.resid_lambdas.fill_(1.0)
        self.x0_lambdas.fill_(0.1)
        if self.cfg.get("embed_dtype", "float32") != "float32":  # bf16 embeddings: a bf16 residual stream
            dtype = getattr(torch, self.cfg["embed_dtype"])
            self.wte.to(dtype)
            self.value_embeds.to(dtype)

    def forward(self, idx):
        T = idx.size(1)
        cos, sin = self.cos[:, :T], self.sin[:, :T]
        x = x0 = norm(self.wte(idx))
        for i, block in enumerate(self.blocks):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
            x = block(x, ve, cos, sin, self.windows[i])
        logits = self.lm_head(norm(x)).float()
        cap = self.cfg["softcap"]
        return cap * torch.tanh(logits / cap)

    def flops_per_token(self):
        """Forward+backward matmul FLOPs per token: 6 per weight (embeddings are lookups) + attention."""
        embed = self.wte.weight.numel() + sum(v.weight.numel() for v in self.value_embeds.values())
        scalars = self.resid_lambdas.numel() + self.x0_lambdas.numel()
        matmul_params = sum(p.numel() for p in self.parameters()) - embed - scalars
        T, h, d = self.cfg["sequence_len"], self.cfg["n_head"], self.cfg["head_dim"]
        attn = sum(12 * h * d * (T if w < 0 else min(w + 1, T)) for w in self.windows)
        return 6 * matmul_params + attn


def model_config(vocab_size, seq_len, profile):
    """Everything needed to rebuild the model (the trusted re-evaluation runs build_model on it)."""
    k = effective_knobs(profile)
    head_dim = k["head_dim"]
    dim = max(1, round(k["depth"] * k["aspect"] / head_dim)) * head_dim
    n_head = dim // head_dim
    assert n_head % KV_HEAD_RATIO == 0, f"KV_HEAD_RATIO {KV_HEAD_RATIO} must divide {n_head} heads"
    cfg = {"vocab_size": vocab_size, "sequence_len": seq_len, "n_layer": k["depth"], "n_embd": dim,
           "n_head": n_head, "n_kv_head": n_head // KV_HEAD_RATIO, "head_dim": head_dim,
           "window_pattern": WINDOW_PATTERN, "short_window_frac": SHORT_WINDOW_FRAC,
           "softcap": LOGIT_SOFTCAP}
    if k["bf16_embeddings"]:  # only then, so cpu/tiny configs (and their saved states) stay as they were
        cfg["embed_dtype"] = "bfloat16"
    return cfg


def build_model(config: dict) -> nn.Module:
    """The model for a config dict (freshly initialised; load a state_dict into it to evaluate)."""
    return GPT(config)


# ---------------------------------------------------------------------------------------------
# Optimizer: Muon for the 2-D weights inside the blocks, AdamW for everything else.
# ---------------------------------------------------------------------------------------------

NS_COEFFS = (3.4445, -4.7750, 2.0315)  # quintic Newton-Schulz iteration (Muon's published tuning)


def orthogonalize(G, steps=5):
    """Approximately replace G's singular values by ~1 (batched over the leading dim)."""
    X = G.to(torch.bfloat16 if G.is_cuda else torch.float32)
    tall = X.size(-2) > X.size(-1)
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    a, b, c = NS_COEFFS
    for _ in range(steps):
        A = X @ X.mT
        X = a * X + (b * A + c * (A @ A)) @ X
    return (X.mT if tall else X).to(G.dtype)


# Polar Express (Amsel et al. 2025): a different (a, b, c) per iteration, as the reference uses.
POLAR_EXPRESS_COEFFS = ((8.156554524902461, -22.48329292557795, 15.878769915207462),
                        (4.042929935166739, -2.808917465908714, 0.5000178451051316),
                        (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
                        (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
                        (2.3465413258596377, -1.7097828382687081, 0.42323551169305323))
NORMUON_BETA2 = 0.95  # decay of NorMuon's per-row (or per-column) second moment, as the reference


def polar_express(G, steps=5):
    """The reference's orthogonalisation: bf16, norm shrunk by 1.02, per-iteration coefficients."""
    X = G.to(torch.bfloat16 if G.is_cuda else torch.float32)
    tall = X.size(-2) > X.size(-1)
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.02 + 1e-6)
    for a, b, c in POLAR_EXPRESS_COEFFS[:steps]:
        A = X @ X.mT
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.mT if tall else X


def normuon_scale(U, second, beta2):
    """NorMuon: divide U by the running RMS of its rows (tall/square) or columns (wide), then
    restore U's overall norm. `second` [n, rows, 1] or [n, 1, cols] is updated in place."""
    red = -1 if U.size(-2) >= U.size(-1) else -2
    n = U.size(red)
    v_mean = U.float().square().mean(dim=red, keepdim=True)
    norm_before = (v_mean.sum(dim=(-2, -1), keepdim=True) * n).sqrt()
    second.lerp_(v_mean.to(second.dtype), 1 - beta2)
    step = second.float().clamp_min(1e-10).rsqrt()
    norm_after = ((v_mean * n) * step.square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    return U.float() * (step * norm_before / norm_after.clamp_min(1e-10))


class Muon(torch.optim.Optimizer):
    """SGD-Nesterov momentum, then orthogonalised updates; params of one shape are stacked.
    variant "classic": Newton-Schulz, decay p *= 1 - lr*wd. variant "reference" (karpathy/
    autoresearch): Polar Express, NorMuon scaling, and cautious decay (only where the update and
    the weight agree in sign), with the shape-scaled LR for both."""

    def __init__(self, params, lr, momentum, weight_decay, variant="classic"):
        if variant not in ("classic", "reference"):
            raise ValueError(f"MUON_VARIANT must be 'classic' or 'reference', got {variant!r}")
        by_shape = {}
        for p in params:
            by_shape.setdefault(tuple(p.shape), []).append(p)
        groups = [dict(params=ps, kind="muon") for _, ps in sorted(by_shape.items())]
        super().__init__(groups, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, variant=variant))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = torch.stack([p.grad for p in params])
            state = self.state[params[0]]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(grads)
            buf, mu = state["momentum_buffer"], group["momentum"]
            buf.lerp_(grads, 1 - mu)
            rows, cols = params[0].shape
            lr = group["lr"] * max(1.0, rows / cols) ** 0.5  # same RMS step for tall matrices
            if group["variant"] == "classic":
                update = orthogonalize(grads.lerp_(buf, mu))
                for p, u in zip(params, update.unbind(0)):
                    p.mul_(1 - group["lr"] * group["weight_decay"]).add_(u, alpha=-lr)
                continue
            if "second_buffer" not in state:
                shape = (len(params), rows, 1) if rows >= cols else (len(params), 1, cols)
                state["second_buffer"] = torch.zeros(shape, dtype=grads.dtype, device=grads.device)
            update = normuon_scale(polar_express(grads.lerp_(buf, mu)), state["second_buffer"], NORMUON_BETA2)
            for p, u in zip(params, update.unbind(0)):
                u = u.to(p.dtype)
                cautious = (u * p >= 0).to(p.dtype)
                p.sub_(lr * u + lr * group["weight_decay"] * p * cautious)


class MuonAdamW:
    """Both optimizers behind one step()/zero_grad()/state_dict(); every group keeps 'initial_lr'."""

    def __init__(self, model, knobs=None):
        knobs = knobs or effective_knobs(prepare.PROFILE)
        dim = model.cfg["n_embd"]
        scale = (dim / 768) ** -0.5  # AdamW LRs were tuned at width 768: scale by 1/sqrt(width)
        betas = (ADAM_BETA1, ADAM_BETA2)
        adam_groups = [
            dict(params=[model.lm_head.weight], lr=UNEMBEDDING_LR * scale),
            dict(params=[model.wte.weight, *[v.weight for v in model.value_embeds.values()]],
                 lr=knobs["embedding_lr"] * scale),
            dict(params=[model.resid_lambdas], lr=SCALAR_LR * 0.01),
            dict(params=[model.x0_lambdas], lr=SCALAR_LR, betas=(0.96, 0.95)),
        ]
        for g in adam_groups:
            g["kind"] = "adamw"
        self.adamw = torch.optim.AdamW(adam_groups, betas=betas, eps=1e-10, weight_decay=0.0)
        self.muon = Muon(list(model.blocks.parameters()), knobs["matrix_lr"], MUON_MOMENTUM,
                         knobs["weight_decay"], knobs["muon_variant"])
        for g in self.param_groups:
            g["initial_lr"] = g["lr"]
            g["initial_weight_decay"] = g["weight_decay"]
        n_opt = sum(len(g["params"]) for g in self.param_groups)
        assert n_opt == len(list(model.parameters())), "every parameter needs exactly one optimizer"

    @property
    def param_groups(self):  # a property: load_state_dict() replaces the group dicts
        return self.adamw.param_groups + self.muon.param_groups

    def step(self):
        self.adamw.step()
        self.muon.step()

    def zero_grad(self):
        self.adamw.zero_grad(set_to_none=True)
        self.muon.zero_grad(set_to_none=True)

    def state_dict(self):
        return {"adamw": self.adamw.state_dict(), "muon": self.muon.state_dict()}

    def load_state_dict(self, sd):
        self.adamw.load_state_dict(sd["adamw"])
        self.muon.load_state_dict(sd["muon"])


# ---------------------------------------------------------------------------------------------
# Schedule: warmup-stable-decay. Under a time budget progress is time; under a step budget the
# last `decay_steps` steps are the cool-down branch, so a state saved before them is undecayed.
# ---------------------------------------------------------------------------------------------


def lr_multiplier(step, elapsed, plan):
    if plan["steps"]:
        n, d, w = plan["steps"], plan["decay_steps"], plan["warmup_steps"]
        if step < w:
            return (step + 1) / w
        if step < n - d:
            return 1.0
        left = (n - 1 - step) / d  # 1 -> 0 over the cool-down; the last step runs at FINAL_LR_FRAC
        return FINAL_LR_FRAC + (1 - FINAL_LR_FRAC) * left
    progress = min(elapsed / plan["budget"], 1.0)
    if progress < WARMUP_RATIO:
        return (progress + 1e-9) / WARMUP_RATIO
    if progress < 1.0 - WARMDOWN_RATIO:
        return 1.0
    left = (1.0 - progress) / WARMDOWN_RATIO
    return FINAL_LR_FRAC + (1 - FINAL_LR_FRAC) * left


def muon_momentum(step):
    frac = min(step / 300, 1.0)  # a lower momentum early, while gradients change quickly
    return (1 - frac) * 0.85 + frac * MUON_MOMENTUM


def weight_decay_multiplier(step, elapsed, plan):
    """The reference variant's decay fades linearly with training time, to 0 at the budget. Under a
    step budget it fades over the cool-down steps only: before them the schedule must not depend on
    the budget, so a state saved at the pre-decay point resumes exactly (Hyperband promotion)."""
    if plan["steps"]:
        n, d = plan["steps"], plan["decay_steps"]
        return 1.0 if step < n - d else max(0.0, (n - 1 - step) / d)
    return max(0.0, 1.0 - elapsed / plan["budget"])


def apply_schedule(optimizer, step, elapsed, plan):
    """Set this step's LR (all groups), Muon momentum and, for the reference variant, its decay."""
    lrm = lr_multiplier(step, elapsed, plan)
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] * lrm
        if group["kind"] == "muon":
            group["momentum"] = muon_momentum(step)
            if group["variant"] == "reference":
                group["weight_decay"] = group["initial_weight_decay"] * weight_decay_multiplier(step, elapsed, plan)
    return lrm


def in_decay(step, elapsed, plan):
    if plan["steps"]:
        return step >= plan["steps"] - plan["decay_steps"]
    return elapsed / plan["budget"] >= 1.0 - WARMDOWN_RATIO


# ---------------------------------------------------------------------------------------------
# Runtime: device, precision, threads, peak FLOPs, memory, saved state.
# ---------------------------------------------------------------------------------------------

PEAK_BF16_FLOPS = {  # dense bf16 tensor-core peak by exact torch.cuda.get_device_name(), for MFU
    "NVIDIA H100 80GB HBM3": 989.4e12,  # H100 SXM5 (NVIDIA H100 datasheet: 1,979 with sparsity)
    "NVIDIA H100 PCIe": 756.5e12,  # H100 PCIe (datasheet: 1,513 with sparsity)
    "NVIDIA H100 NVL": 835.5e12,  # H100 NVL, per GPU (datasheet: 1,671 with sparsity)
    "NVIDIA H200": 989.4e12,  # H200 SXM (H200 datasheet: 1,979 with sparsity)
    "NVIDIA H200 NVL": 835.5e12,  # H200 NVL (datasheet: 1,671 with sparsity)
    "NVIDIA GH200 480GB": 989.4e12,  # Grace Hopper superchip, its H100-class GPU
    "NVIDIA GH200 144G HBM3e": 989.4e12,  # the HBM3e GH200
    "NVIDIA A100-SXM4-40GB": 312e12,  # A100 datasheet: 312 dense, all A100 variants
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA B200": 2250e12,  # HGX B200 datasheet: 4.5 PF with sparsity per GPU
    "NVIDIA L40S": 362.05e12,  # L40S datasheet: 733 with sparsity
    "NVIDIA GeForce RTX 4090": 165.2e12,  # Ada whitepaper: bf16 with fp32 accumulate (what torch uses)
    "NVIDIA GeForce RTX 5090": 209.5e12,  # RTX Blackwell whitepaper: bf16 with fp32 accumulate
    # GB10 (DGX Spark): an ESTIMATE. NVIDIA publishes only "1 PFLOP FP4 with sparsity"; halving for
    # dense, again for FP8 and again for BF16 gives 125 TFLOPS. Not measured; gpu_check.py's GEMM
    # step measures the real figure.
    "NVIDIA GB10": 125e12,
}


def peak_flops_for(name):
    """The table's figure for a device name (exact match, case and spacing ignored), or 0.0 with
    an "unknown device" line: a guessed peak would print a wrong MFU."""
    wanted = " ".join(name.split()).lower()
    peak = next((f for key, f in PEAK_BF16_FLOPS.items() if key.lower() == wanted), 0.0)
    if not peak:
        print(f"unknown device {name!r}: no bf16 peak in PEAK_BF16_FLOPS, mfu_percent reads 0.00")
    return peak


def mfu_percent(flops_per_step, steps, seconds, peak):
    """Model FLOPs utilisation of `steps` optimizer steps timed at `seconds`; 0 when not computable."""
    if not (peak > 0 and steps > 0 and seconds > 0):
        return 0.0
    return 100.0 * flops_per_step * steps / seconds / peak


def ensure_ptxas():
    """Triton on sm_121a (GB10) needs a CUDA 13 ptxas; point TRITON_PTXAS_PATH at one if unset."""
    if os.environ.get("TRITON_PTXAS_PATH"):
        return
    found = sorted(glob.glob("/usr/local/cuda-13*/bin/ptxas"), reverse=True) + glob.glob("/usr/local/cuda/bin/ptxas")
    if found:
        os.environ["TRITON_PTXAS_PATH"] = found[0]
        print(f"TRITON_PTXAS_PATH={found[0]} (sm_12x needs a CUDA 13 ptxas)")
    else:
        print("warning: no CUDA 13 ptxas found; Triton may fail on sm_12x (set TRITON_PTXAS_PATH)")


def setup_runtime():
    """(device, autocast context, compile?) for this machine."""
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")
        if torch.cuda.get_device_capability()[0] == 12:
            ensure_ptxas()
        return torch.device("cuda"), torch.amp.autocast("cuda", dtype=torch.bfloat16), True
    if torch.backends.mps.is_available():
        return torch.device("mps"), contextlib.nullcontext(), False
    threads = int(os.environ.get("AUTORESEARCH_THREADS") or CPU_THREADS or os.cpu_count() or 1)
    torch.set_num_threads(threads)
    autocast = torch.amp.autocast("cpu", dtype=torch.bfloat16) if CPU_BF16 else contextlib.nullcontext()
    return torch.device("cpu"), autocast, COMPILE_CPU


def peak_flops(device):
    if device.type != "cuda":
        return 0.0  # CPU/MPS: no trustworthy peak figure here, so mfu_percent reads 0.00
    return peak_flops_for(torch.cuda.get_device_name(device))


def peak_memory_mb(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def file_sha():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def atomic_save(obj, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def make_plan():
    """Time budget, or a step budget whose last `decay_steps` steps are the cool-down."""
    steps = int(os.environ.get("AUTORESEARCH_STEPS") or 0)
    decay = os.environ.get("AUTORESEARCH_DECAY_STEPS")
    decay_steps = min(int(decay) if decay else round(WARMDOWN_RATIO * steps), steps)
    return {"budget": prepare.TIME_BUDGET, "steps": steps, "decay_steps": decay_steps,
            "warmup_steps": round(WARMUP_RATIO * steps)}


def fail(reason):
    print(f"FAIL: {reason}", flush=True)
    sys.exit(1)


def print_summary(values):
    print("---")
    for key, value in values.items():
        print(f"{key + ':':<18}{value}")


# ---------------------------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------------------------


def main():
    t_start = time.time()
    device, autocast, compile_on = setup_runtime()
    profile = prepare.PROFILE
    seed = int(os.environ.get("AUTORESEARCH_SEED") or SEED)
    torch.manual_seed(seed)
    knobs = effective_knobs(profile)
    tokenizer = prepare.Tokenizer.from_directory()
    V, T = tokenizer.get_vocab_size(), prepare.MAX_SEQ_LEN
    cfg = model_config(V, T, profile)
    model = build_model(cfg).to(device)
    num_params = sum(p.numel() for p in model.parameters())
    try:
        backend = probe_attention(device, autocast, cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"],
                                  T, model.windows, compile_on, model_attention_dtypes(model, autocast, device))
    except (RuntimeError, ValueError) as e:
        fail(f"attention: {e}")
    optimizer = MuonAdamW(model, knobs)
    rows = knobs["rows"]
    accum = max(1, round(knobs["total"] / (rows * T)))
    tokens_per_step = accum * rows * T
    plan = make_plan()
    print(f"profile {profile} | device {device} | attention {backend} | compile {compile_on} | "
          f"threads {torch.get_num_threads()} | seed {seed}")
    print(f"model {cfg}")
    print(f"params {num_params:,} | flops/token {model.flops_per_token():.3e} | batch {rows}x{T} x{accum} "
          f"= {tokens_per_step:,} tokens/step | " +
          (f"steps {plan['steps']} (decay {plan['decay_steps']})" if plan["steps"] else f"budget {plan['budget']}s"))

    step, elapsed, loader_state, pending = 0, 0.0, None, None
    resume_path, save_path = os.environ.get("AUTORESEARCH_RESUME_STATE"), os.environ.get("AUTORESEARCH_SAVE_STATE")
    if resume_path:
        try:
            state = torch.load(resume_path, map_location=device, weights_only=False)
        except (OSError, RuntimeError, EOFError) as e:
            fail(f"cannot read resume state {resume_path}: {e}")
        if state["config"] != cfg:
            fail(f"resume state was saved for another model: {state['config']} != {cfg}")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed, loader_state = state["step"], state["training_seconds"], state["loader"]
        pending = state.get("pending")  # the batch fetched ahead when the state was saved
        plan["warmup_steps"] = state["warmup_steps"]  # the warmup already run stays what it was
        torch.set_rng_state(state["rng"]["cpu"])
        if device.type == "cuda" and state["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        print(f"resumed from {resume_path} at step {step} ({elapsed:.1f}s trained)")
    loader = prepare.make_dataloader(tokenizer, rows, T, "train", device=device, state=loader_state)
    x, y, epoch = next(loader) if pending is None else (pending[0].to(device), pending[1].to(device), pending[2])

    def loss_fn(x, y):
        return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1), ignore_index=-1)

    train_loss = torch.compile(loss_fn, dynamic=False) if compile_on else loss_fn
    flops_per_step, peak = model.flops_per_token() * tokens_per_step, peak_flops(device)
    explode_at = EXPLODE_FACTOR * math.log(V)
    saved, local_steps, counted_steps, counted_seconds, first_line_at = False, 0, 0, 0.0, None
    t_train = time.time()
    while True:
        if plan["steps"] and step >= plan["steps"]:
            break
        if save_path and not saved and in_decay(step, elapsed, plan):  # the pre-decay point
            atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                         "loader": loader.state_dict(), "training_seconds": elapsed,
                         "warmup_steps": plan["warmup_steps"], "config": cfg, "train_py_sha": file_sha(),
                         "pending": (x.cpu(), y.cpu(), epoch),  # fetched ahead: the loader is past it
                         "rng": {"cpu": torch.get_rng_state(),
                                 "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else None}},
                        save_path)
            saved = True
            print(f"saved state at step {step} to {save_path}")
        t0 = time.time()
        lrm = apply_schedule(optimizer, step, elapsed, plan)
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            with autocast:
                loss = train_loss(x, y)
            (loss / accum).backward()
            loss_sum += loss.detach()
            x, y, epoch = next(loader)  # pack the next batch while the device works through this one
        if knobs["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), knobs["grad_clip"])
        optimizer.step()
        optimizer.zero_grad()
        loss_f = loss_sum.item() / accum  # .item() waits for the device, so dt below is honest
        if not math.isfinite(loss_f):
            fail(f"loss is {loss_f} at step {step}")
        if loss_f > explode_at:
            fail(f"loss exploded to {loss_f:.2f} at step {step} (limit {explode_at:.2f})")
        dt = time.time() - t0
        step, local_steps = step + 1, local_steps + 1
        if local_steps > knobs["startup"]:  # compile and warm-up steps are not training time
            elapsed += dt
            counted_steps, counted_seconds = counted_steps + 1, counted_seconds + dt
        print(f"step {step:05d} | loss {loss_f:.6f} | lrm {lrm:.3f} | dt {dt * 1000:.0f}ms | "
              f"tok/s {tokens_per_step / dt:,.0f} | epoch {epoch} | trained {elapsed:.1f}s", flush=True)
        first_line_at = first_line_at or time.time()
        if local_steps == 1:  # Python's GC stalls for long on big heaps: freeze what exists now
            gc.collect()
            gc.freeze()
            gc.disable()
        elif step % 5000 == 0:
            gc.collect()
        if not plan["steps"] and local_steps > knobs["startup"] and (
                elapsed >= plan["budget"] or runtime.budget_spent(first_line_at, plan["budget"])):
            break  # our clock, or the harness's (a slow start counts there: docs/contracts.md)
    gc.unfreeze()  # hand everything back to the collector (else native bindings report leaks at exit)
    gc.enable()
    if local_steps <= knobs["startup"]:  # too few steps to time: count the wall clock instead
        elapsed += time.time() - t_train

    print(f"training done: {step} steps, trained {elapsed:.1f}s", flush=True)
    model.eval()
    if prepare.SEALED:  # loop mode: no validation data here; the harness evaluates the artifact
        val_bpb, eval_seconds = None, 0.0
    else:
        eval_model = torch.compile(model, dynamic=False) if compile_on else model
        t_eval = time.time()
        with torch.no_grad(), autocast:
            val_bpb = prepare.evaluate_bpb(eval_model, tokenizer, rows)
        eval_seconds = time.time() - t_eval
        if not math.isfinite(val_bpb):
            fail(f"val_bpb is {val_bpb}")
    artifact = os.environ.get("AUTORESEARCH_ARTIFACT")
    if artifact:  # the model as data for the harness's trusted evaluator: weights + recorded aten ops
        set_attention_backend("sdpa")  # plain aten attention: the evaluator replays nothing else
        runtime.save_model(model, artifact, cfg, file_sha(), V, T, autocast)
    mfu = mfu_percent(flops_per_step, counted_steps, counted_seconds, peak)  # this process's steps only
    print_summary({
        "val_bpb": "sealed" if val_bpb is None else f"{val_bpb:.6f}",
        "training_seconds": f"{elapsed:.1f}",
        "total_seconds": f"{time.time() - t_start:.1f}",
        "peak_vram_mb": f"{peak_memory_mb(device):.1f}",
        "mfu_percent": f"{mfu:.2f}",
        "total_tokens_M": f"{step * tokens_per_step / 1e6:.1f}",
        "num_steps": step,
        "num_params_M": f"{num_params / 1e6:.1f}",
        "depth": cfg["n_layer"],
        "eval_seconds": f"{eval_seconds:.1f}",
        "attn_backend": backend,
        "device": device.type,
        "profile": profile,
        "data": prepare.data_fingerprint(),
    })


if __name__ == "__main__":
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print("""usage: uv run train.py    (no arguments: everything comes from the environment)

Trains for prepare.TIME_BUDGET seconds, evaluates val_bpb, prints the summary block.
  AUTORESEARCH_TIME_BUDGET  training seconds (default 300; read by prepare.py)
  AUTORESEARCH_PROFILE      gpu | cpu | tiny (detected; read by prepare.py)
  AUTORESEARCH_CACHE        data and tokenizer folder (default ~/.cache/autoresearch)
  AUTORESEARCH_STEPS        train exactly N optimizer steps instead of the time budget
  AUTORESEARCH_DECAY_STEPS  with STEPS: the last D steps are the LR cool-down
  AUTORESEARCH_SAVE_STATE / AUTORESEARCH_RESUME_STATE   pre-decay training state (Hyperband)
  AUTORESEARCH_ARTIFACT     save the trained weights here (trusted re-evaluation)
  AUTORESEARCH_SEED         override the seed
  AUTORESEARCH_THREADS      CPU threads
  AUTORESEARCH_ATTN         force one attention backend""")
        sys.exit(0)
    main()
