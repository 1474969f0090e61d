"""
Pretraining script: one GPT, one device, one fixed budget. The research loop edits this file.

Read top to bottom: the knobs, the model, the optimizer, the schedule, then main(), which trains
for prepare.TIME_BUDGET seconds (or AUTORESEARCH_STEPS steps), evaluates with prepare.evaluate_bpb
and prints the summary block of docs/contracts.md. The knobs below are the values that run: the
reference recipe (karpathy/autoresearch) on a GPU; a tag on the cpu or tiny profile starts with a
commit that writes that profile's smaller values in (runtime.PROFILE_KNOBS). Platform plumbing
(device set-up, the attention backends, compile with its eager fallback, peak FLOPs, saved state,
the model saved as data) is in runtime.py, a fixed file this one calls and may stop using. In the
research loop (prepare.SEALED) it runs in a sandbox without validation data: it saves the model
and the harness evaluates it; every step prints a `step N | ...` line, by which the harness
times the training itself.
Usage: uv run train.py
"""

import gc
import hashlib
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import prepare
import runtime

# ---------------------------------------------------------------------------------------------
# Hyperparameters. One literal per line: the offline proposer and Hyperband rewrite these lines.
# ---------------------------------------------------------------------------------------------

# Model shape
DEPTH = 8  # transformer layers
ASPECT_RATIO = 64  # model_dim = depth * ASPECT_RATIO, rounded to a multiple of HEAD_DIM
HEAD_DIM = 128  # width of one attention head
KV_HEAD_RATIO = 1  # query heads per key/value head (GQA); 1 = plain multi-head attention
WINDOW_PATTERN = "SSSL"  # per-layer attention span, repeated: L = full context, S = short window
SHORT_WINDOW_FRAC = 0.5  # an S layer sees this fraction of the context
LOGIT_SOFTCAP = 15.0  # logits = cap * tanh(logits / cap): keeps early logits from running away
EMBED_DTYPE = "bfloat16"  # dtype of the token and value embeddings; bfloat16 makes the residual stream bf16

# Batch
DEVICE_BATCH_SIZE = 128  # sequences per forward/backward
TOTAL_BATCH_SIZE = 524288  # tokens per optimizer step, 2**19 (gradient accumulation makes up the rest)

# Optimization
MATRIX_LR = 0.04  # Muon learning rate for the 2-D weights inside the blocks
EMBEDDING_LR = 0.6  # AdamW learning rate for token and value embeddings
UNEMBEDDING_LR = 0.004  # AdamW learning rate for the output head
SCALAR_LR = 0.5  # AdamW learning rate for the per-layer residual scalars
WEIGHT_DECAY = 0.2  # decoupled weight decay on the Muon weights
ADAM_BETA1 = 0.8  # AdamW first-moment decay (short memory: embeddings move fast)
ADAM_BETA2 = 0.95  # AdamW second-moment decay
MUON_MOMENTUM = 0.95  # Muon Nesterov momentum (ramped up from 0.85 over the first 300 steps)
GRAD_CLIP = 0.0  # clip the global gradient norm to this; 0 disables
MUON_VARIANT = "reference"  # classic | reference: Newton-Schulz + plain decay, or Polar Express + NorMuon + cautious faded decay
WARMUP_RATIO = 0.0  # fraction of the budget spent warming the LR up
WARMDOWN_RATIO = 0.5  # fraction of the budget spent cooling the LR down (WSD schedule)
FINAL_LR_FRAC = 0.0  # LR at the end of the cool-down, as a fraction of the peak
SEED = 42  # initialisation seed (AUTORESEARCH_SEED overrides it)

# Runtime
COMPILE = True  # torch.compile the model and the Muon step (a failure falls back to eager, loudly)
STARTUP_STEPS = 10  # first steps not counted as training time (compile, autotune, allocator warm-up)
EXPLODE_FACTOR = 3.0  # fast-fail when the loss exceeds this times ln(vocab): diverged


# ---------------------------------------------------------------------------------------------
# Model: a nanochat-style GPT. Attention is runtime.attention, the backend the probe picked.
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
        y = runtime.attention(q, k, v.to(q.dtype), window)  # one dtype in: v is fp32 where ve was mixed in
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


def model_config(vocab_size, seq_len):
    """Everything needed to rebuild the model (the inference tools run build_model on it)."""
    dim = max(1, round(DEPTH * ASPECT_RATIO / HEAD_DIM)) * HEAD_DIM
    n_head = dim // HEAD_DIM
    assert n_head % KV_HEAD_RATIO == 0, f"KV_HEAD_RATIO {KV_HEAD_RATIO} must divide {n_head} heads"
    cfg = {"vocab_size": vocab_size, "sequence_len": seq_len, "n_layer": DEPTH, "n_embd": dim,
           "n_head": n_head, "n_kv_head": n_head // KV_HEAD_RATIO, "head_dim": HEAD_DIM,
           "window_pattern": WINDOW_PATTERN, "short_window_frac": SHORT_WINDOW_FRAC,
           "softcap": LOGIT_SOFTCAP}
    if EMBED_DTYPE != "float32":  # only then, so float32 configs (and their saved states) stay as they were
        cfg["embed_dtype"] = EMBED_DTYPE
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
    """The reference's orthogonalisation: bf16 on GPU, norm shrunk by 1.02, per-iteration coefficients."""
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
    restore U's overall norm. `second` [n, rows, 1] or [n, 1, cols] is updated in place. The
    scale is computed in float32 and applied in U's dtype (bf16 on GPU), as the reference does."""
    red = -1 if U.size(-2) >= U.size(-1) else -2
    n = U.size(red)
    v_mean = U.float().square().mean(dim=red, keepdim=True)
    norm_before = (v_mean.sum(dim=(-2, -1), keepdim=True) * n).sqrt()
    second.lerp_(v_mean.to(second.dtype), 1 - beta2)
    step = second.float().clamp_min(1e-10).rsqrt()
    norm_after = ((v_mean * n) * step.square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    return U * (step * norm_before / norm_after.clamp_min(1e-10)).to(U.dtype)


def reference_muon_step(grads, params, momentum_buffer, second_buffer, momentum, lr, weight_decay):
    """The reference's Muon step on a stack of same-shape weights, in place: Nesterov momentum,
    Polar Express, NorMuon, cautious decay (only where update and weight agree in sign). The
    hyperparameters are 0-D tensors, so the compiled step does not recompile as they move."""
    momentum_buffer.lerp_(grads, 1 - momentum)
    g = normuon_scale(polar_express(grads.lerp_(momentum_buffer, momentum)), second_buffer, NORMUON_BETA2)
    lr, weight_decay = lr.to(g.dtype), weight_decay.to(g.dtype)
    params.sub_(lr * g + lr * weight_decay * params * (g * params >= 0))


class Muon(torch.optim.Optimizer):
    """SGD-Nesterov momentum, then orthogonalised updates; params of one shape are stacked.
    variant "classic": Newton-Schulz, decay p *= 1 - lr*wd. variant "reference" (karpathy/
    autoresearch): reference_muon_step, with the shape-scaled LR for both update and decay."""

    def __init__(self, params, lr, momentum, weight_decay, variant="classic", compile_on=False):
        if variant not in ("classic", "reference"):
            raise ValueError(f"MUON_VARIANT must be 'classic' or 'reference', got {variant!r}")
        by_shape = {}
        for p in params:
            by_shape.setdefault(tuple(p.shape), []).append(p)
        groups = [dict(params=ps, kind="muon") for _, ps in sorted(by_shape.items())]
        super().__init__(groups, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, variant=variant))
        self.reference_step = runtime.compiled(reference_muon_step, "muon step", compile_on)
        self.scalars = {}  # device -> 0-D (momentum, lr, weight decay) tensors the step reads

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
            rows, cols = params[0].shape
            lr = group["lr"] * max(1.0, rows / cols) ** 0.5  # same RMS step for tall matrices
            if group["variant"] == "classic":
                buf.lerp_(grads, 1 - mu)
                update = orthogonalize(grads.lerp_(buf, mu))
                for p, u in zip(params, update.unbind(0)):
                    p.mul_(1 - group["lr"] * group["weight_decay"]).add_(u, alpha=-lr)
                continue
            if "second_buffer" not in state:
                shape = (len(params), rows, 1) if rows >= cols else (len(params), 1, cols)
                state["second_buffer"] = torch.zeros(shape, dtype=grads.dtype, device=grads.device)
            scalars = self.scalars.setdefault(grads.device, torch.zeros(3, device=grads.device).unbind(0))
            for t, value in zip(scalars, (mu, lr, group["weight_decay"])):
                t.fill_(value)
            stacked = torch.stack(params)
            self.reference_step(grads, stacked, buf, state["second_buffer"], *scalars)
            for p, new in zip(params, stacked.unbind(0)):
                p.copy_(new)


class MuonAdamW:
    """Both optimizers behind one step()/zero_grad()/state_dict(); every group keeps 'initial_lr'."""

    def __init__(self, model, compile_on=False):
        dim = model.cfg["n_embd"]
        scale = (dim / 768) ** -0.5  # AdamW LRs were tuned at width 768: scale by 1/sqrt(width)
        adam_groups = [
            dict(params=[model.lm_head.weight], lr=UNEMBEDDING_LR * scale),
            dict(params=[model.wte.weight, *[v.weight for v in model.value_embeds.values()]], lr=EMBEDDING_LR * scale),
            dict(params=[model.resid_lambdas], lr=SCALAR_LR * 0.01),
            dict(params=[model.x0_lambdas], lr=SCALAR_LR, betas=(0.96, 0.95)),
        ]
        for g in adam_groups:
            g["kind"] = "adamw"
        fused = {"fused": True} if model.lm_head.weight.is_cuda else {}  # one CUDA kernel for all params
        self.adamw = torch.optim.AdamW(adam_groups, betas=(ADAM_BETA1, ADAM_BETA2), eps=1e-10, weight_decay=0.0, **fused)
        self.muon = Muon(list(model.blocks.parameters()), MATRIX_LR, MUON_MOMENTUM, WEIGHT_DECAY, MUON_VARIANT, compile_on)
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


def make_plan():
    """Time budget, or a step budget whose last `decay_steps` steps are the cool-down."""
    steps = int(os.environ.get("AUTORESEARCH_STEPS") or 0)
    decay = os.environ.get("AUTORESEARCH_DECAY_STEPS")
    decay_steps = min(int(decay) if decay else round(WARMDOWN_RATIO * steps), steps)
    return {"budget": prepare.TIME_BUDGET, "steps": steps, "decay_steps": decay_steps,
            "warmup_steps": round(WARMUP_RATIO * steps)}


def file_sha():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


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
    runtime.use_profile_knobs(__name__, prepare.PROFILE)  # a bare run on cpu/tiny: that profile's values
    device, autocast = runtime.setup_device()
    seed = int(os.environ.get("AUTORESEARCH_SEED") or SEED)
    torch.manual_seed(seed)
    tokenizer = prepare.Tokenizer.from_directory()
    V, T = tokenizer.get_vocab_size(), prepare.MAX_SEQ_LEN
    cfg = model_config(V, T)
    model = build_model(cfg).to(device)
    num_params = sum(p.numel() for p in model.parameters())
    try:
        backend = runtime.pick_attention(model, autocast, device, COMPILE)
    except (RuntimeError, ValueError) as e:
        fail(f"attention: {e}")
    optimizer = MuonAdamW(model, COMPILE)
    accum = max(1, round(TOTAL_BATCH_SIZE / (DEVICE_BATCH_SIZE * T)))
    tokens_per_step = accum * DEVICE_BATCH_SIZE * T
    plan = make_plan()
    print(f"profile {prepare.PROFILE} | device {device} | attention {backend} | compile {COMPILE} | "
          f"threads {torch.get_num_threads()} | seed {seed}")
    print(f"model {cfg}")
    print(f"params {num_params:,} | flops/token {model.flops_per_token():.3e} | batch {DEVICE_BATCH_SIZE}x{T} x{accum} "
          f"= {tokens_per_step:,} tokens/step | " +
          (f"steps {plan['steps']} (decay {plan['decay_steps']})" if plan["steps"] else f"budget {plan['budget']}s"))

    step, elapsed, loader_state, pending = 0, 0.0, None, None
    resume_path, save_path = os.environ.get("AUTORESEARCH_RESUME_STATE"), os.environ.get("AUTORESEARCH_SAVE_STATE")
    if resume_path:
        try:
            state = runtime.load_state(resume_path, model, optimizer, device, cfg)
        except (OSError, RuntimeError, EOFError, ValueError) as e:
            fail(f"cannot resume from {resume_path}: {e}")
        step, elapsed, loader_state = state["step"], state["training_seconds"], state["loader"]
        pending = state.get("pending")  # the batch fetched ahead when the state was saved
        plan["warmup_steps"] = state["warmup_steps"]  # the warmup already run stays what it was
        print(f"resumed from {resume_path} at step {step} ({elapsed:.1f}s trained)")
    loader = prepare.make_dataloader(tokenizer, DEVICE_BATCH_SIZE, T, "train", device=device, state=loader_state)
    x, y, epoch = next(loader) if pending is None else (pending[0].to(device), pending[1].to(device), pending[2])

    def loss_fn(x, y):
        return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1), ignore_index=-1)

    def trial(f):  # forward and backward on the first batch, so both compile now (backward lazily)
        with autocast:
            f(x, y).backward()
    train_loss = runtime.compiled(loss_fn, "model", COMPILE, trial)
    optimizer.zero_grad()  # the trial's gradients
    flops_per_step = model.flops_per_token() * tokens_per_step
    peak, peak_source = runtime.peak_flops(device)
    explode_at = EXPLODE_FACTOR * math.log(V)
    saved, local_steps, counted_steps, counted_seconds, first_line_at = False, 0, 0, 0.0, None
    t_train = time.time()
    while True:
        if plan["steps"] and step >= plan["steps"]:
            break
        if save_path and not saved and in_decay(step, elapsed, plan):  # the pre-decay point
            runtime.save_state(save_path, model, optimizer, step=step, loader=loader.state_dict(),
                               training_seconds=elapsed, warmup_steps=plan["warmup_steps"], config=cfg,
                               train_py_sha=file_sha(), pending=(x.cpu(), y.cpu(), epoch))  # fetched ahead
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
        if GRAD_CLIP > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad()
        loss_f = loss_sum.item() / accum  # .item() waits for the device, so dt below is honest
        if not math.isfinite(loss_f):
            fail(f"loss is {loss_f} at step {step}")
        if loss_f > explode_at:
            fail(f"loss exploded to {loss_f:.2f} at step {step} (limit {explode_at:.2f})")
        dt = time.time() - t0
        step, local_steps = step + 1, local_steps + 1
        if local_steps > STARTUP_STEPS:  # compile and warm-up steps are not training time
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
        if not plan["steps"] and ((local_steps > STARTUP_STEPS and elapsed >= plan["budget"])
                                  or runtime.budget_spent(first_line_at, plan["budget"])):
            break  # our clock, or the harness's from the first step line (warm-up steps count there)
    gc.unfreeze()  # hand everything back to the collector (else native bindings report leaks at exit)
    gc.enable()
    if local_steps <= STARTUP_STEPS:  # too few steps to time: count the wall clock instead
        elapsed += time.time() - t_train

    print(f"training done: {step} steps, trained {elapsed:.1f}s", flush=True)
    model.eval()
    if prepare.SEALED:  # loop mode: no validation data here; the harness evaluates the artifact
        val_bpb, eval_seconds = None, 0.0
    else:
        eval_model = runtime.compiled(model, "evaluation", COMPILE)
        t_eval = time.time()
        with torch.no_grad(), autocast:
            val_bpb = prepare.evaluate_bpb(eval_model, tokenizer, DEVICE_BATCH_SIZE)
        eval_seconds = time.time() - t_eval
        if not math.isfinite(val_bpb):
            fail(f"val_bpb is {val_bpb}")
    artifact = os.environ.get("AUTORESEARCH_ARTIFACT")
    if artifact:  # the model as data for the harness's trusted evaluator: weights + recorded aten ops
        runtime.save_model(model, artifact, cfg, file_sha(), V, T, autocast)
    mfu = runtime.mfu_percent(flops_per_step, counted_steps, counted_seconds, peak)  # this process's steps only
    print_summary({
        "val_bpb": "sealed" if val_bpb is None else f"{val_bpb:.6f}",
        "training_seconds": f"{elapsed:.1f}",
        "total_seconds": f"{time.time() - t_start:.1f}",
        "peak_vram_mb": f"{runtime.peak_memory_mb(device):.1f}",
        "mfu_percent": f"{mfu:.2f}",
        "total_tokens_M": f"{step * tokens_per_step / 1e6:.1f}",
        "num_steps": step,
        "num_params_M": f"{num_params / 1e6:.1f}",
        "depth": cfg["n_layer"],
        "eval_seconds": f"{eval_seconds:.1f}",
        "attn_backend": backend,
        "compile": "; ".join(runtime.COMPILE_NOTES) or ("on" if COMPILE else "off"),
        "peak_flops": peak_source,
        "device": device.type,
        "profile": prepare.PROFILE,
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
