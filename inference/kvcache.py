"""KV-cached forward pass of train.py's GPT, reusing the model's own modules and weights.

It repeats GPT.forward / Block.forward / Attention.forward step by step (residual lambdas, x0
mix-in, value embeddings with their gate, RoPE at absolute positions, QK-norm, relu^2 MLP, logit
softcap); only attention differs: new queries attend to the cached keys plus the new ones. A
sliding-window layer (window w: query i sees keys j with 0 <= i-j <= w) keeps only its last w
keys, all that a later query can see; a full layer keeps everything. Positions are bounded by the
model's context (its RoPE table); generate.py re-prefills when the context is full.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from inference import cost


class KVCache:
    """Per-layer keys/values [B, Hkv, n, D] and their absolute positions; `pos` is the next position."""

    def __init__(self, model, slack: int = 0):
        self.windows = list(model.windows)
        self.slack = slack  # extra keys a window layer keeps, so truncate() can roll back that far
        self.k = [None] * len(self.windows)
        self.v = [None] * len(self.windows)
        self.kpos = [None] * len(self.windows)
        self.pos = 0

    def append(self, layer, k, v, positions):
        """Add new keys/values; return everything the new queries may see (before trimming)."""
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
            positions = torch.cat([self.kpos[layer], positions])
        w = self.windows[layer]
        keep = k.size(2) if w < 0 else min(w + self.slack, k.size(2))  # a later query sees <= w past keys
        self.k[layer], self.v[layer] = k[:, :, k.size(2) - keep:], v[:, :, k.size(2) - keep:]
        self.kpos[layer] = positions[positions.numel() - keep:]
        return k, v, positions

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)

    def select(self, rows):
        """Keep only batch rows `rows` (e.g. the continuations still running)."""
        self.k = [t[rows] if t is not None else None for t in self.k]
        self.v = [t[rows] if t is not None else None for t in self.v]

    def truncate(self, pos):
        """Forget everything at positions >= pos (speculative decoding rolls back rejected tokens).
        Exact when the cache was built with slack >= the number of positions rolled back: a window
        layer still holds the w keys before `pos`."""
        for i in range(len(self.k)):
            if self.k[i] is None:
                continue
            m = self.kpos[i] < pos
            self.k[i], self.v[i], self.kpos[i] = self.k[i][:, :, m], self.v[i][:, :, m], self.kpos[i][m]
        self.pos = pos


def _attend(q, k, v, qpos, kpos, window):
    """q [B,H,Tq,D], k/v [B,Hkv,Tk,D]: softmax attention under the causal window mask by position."""
    allowed = kpos[None, :] <= qpos[:, None]
    if window >= 0:
        allowed = allowed & (qpos[:, None] - kpos[None, :] <= window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=q.size(1) != k.size(1))


def _attention(attn, x, ve, cos, sin, cache, layer, qpos, gate_channels, norm, apply_rotary):
    B, T, _ = x.shape
    q = attn.c_q(x).view(B, T, attn.n_head, attn.head_dim)
    k = attn.c_k(x).view(B, T, attn.n_kv_head, attn.head_dim)
    v = attn.c_v(x).view(B, T, attn.n_kv_head, attn.head_dim)
    if ve is not None:
        gate = 2 * torch.sigmoid(attn.ve_gate(x[..., :gate_channels]))
        v = v + gate.unsqueeze(-1) * ve.view(B, T, attn.n_kv_head, attn.head_dim)
    q, k = norm(apply_rotary(q, cos, sin)), norm(apply_rotary(k, cos, sin))
    v = v.to(q.dtype)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k, v, kpos = cache.append(layer, k, v, qpos)
    y = _attend(q, k, v, qpos, kpos, cache.windows[layer]).transpose(1, 2)
    return attn.c_proj(y.reshape(B, T, -1))


@torch.no_grad()
def forward_cached(model, idx, cache, train_module):
    """Logits [B, T, V] for new tokens idx [B, T] following the cache's tokens; advances the cache.
    `train_module` is the train.py the model was built by (its norm, apply_rotary, constants)."""
    T = idx.size(1)
    p0 = cache.pos
    if p0 + T > model.cos.size(1):
        raise ValueError(f"positions {p0}..{p0 + T - 1} exceed the model's context {model.cos.size(1)}")
    norm, rotary = train_module.norm, train_module.apply_rotary
    gate_channels = getattr(train_module, "VE_GATE_CHANNELS", 32)
    cos, sin = model.cos[:, p0:p0 + T], model.sin[:, p0:p0 + T]
    qpos = torch.arange(p0, p0 + T, device=idx.device)
    x = x0 = norm(model.wte(idx))
    for i, block in enumerate(model.blocks):
        x = model.resid_lambdas[i] * x + model.x0_lambdas[i] * x0
        ve = model.value_embeds[str(i)](idx) if str(i) in model.value_embeds else None
        x = x + _attention(block.attn, norm(x), ve, cos, sin, cache, i, qpos, gate_channels, norm, rotary)
        x = x + block.mlp(norm(x))
    cache.pos = p0 + T
    logits = model.lm_head(norm(x)).float()
    cap = model.cfg["softcap"]
    return cap * torch.tanh(logits / cap)


def kv_bytes_per_token(config: dict, context: int | None = None, dtype_bytes: int = 4) -> float:
    """KV-cache bytes per token over a context, from the config alone (inference/cost.py)."""
    return cost.kv_bytes_per_token(config, context, dtype_bytes)
