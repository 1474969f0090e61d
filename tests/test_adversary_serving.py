"""The serving figures (decode FLOPs and KV bytes per token) come from the graph itself, and the
judge keeps an equal result that is >= 10% cheaper to serve (agent/judges/judge.py efficiency
rule). They must not fall when the same model is only written differently: a projection by
einsum, a weight stored flat and viewed, or a weight moved out of the state_dict into a constant
used to pass unweighed (the rule counted only 2-D state_dict weights fed to mm/linear/matmul...),
so a proposal could buy an "efficiency" keep with no change to the model."""
import json

import torch

import runtime
from harness import graph as G

V, T, D, ROWS = 64, 16, 32, 2


class Attn(torch.nn.Module):
    """One attention layer and a head; `how` writes its projections differently, same weights."""

    def __init__(self, how="linear", seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.how = how
        self.wte = torch.nn.Parameter(torch.randn(V, D, generator=g))
        mats = {k: torch.randn(D, D, generator=g) / D ** 0.5 for k in ("q", "k", "v", "o")}
        mats["head"] = torch.randn(V, D, generator=g) / D ** 0.5
        for k, m in mats.items():
            if how == "flat":
                setattr(self, k, torch.nn.Parameter(m.reshape(-1).clone()))
            elif how == "constant":
                self.register_buffer(k, m.clone(), persistent=False)
            else:
                setattr(self, k, torch.nn.Parameter(m.clone()))

    def proj(self, x, name):
        w = getattr(self, name)
        if self.how == "flat":
            w = w.view(-1, D)
        if self.how == "einsum":
            return torch.einsum("btd,od->bto", x, w)
        return x @ w.t()

    def forward(self, idx):
        x = self.wte[idx]
        B = idx.size(0)
        q, k, v = (self.proj(x, n).view(B, T, 2, D // 2).transpose(1, 2) for n in ("q", "k", "v"))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D), "o")
        return self.proj(x, "head")


def serving(how):
    model = Attn(how).eval()
    tokens = torch.randint(0, V, (ROWS, T))
    with torch.no_grad():
        spec, consts = runtime.record_graph(model, tokens)
        g = G.load(json.dumps(spec), {k: v.detach().clone() for k, v in model.state_dict().items()}, consts,
                   rows=ROWS, seq_len=T, device="cpu")
        ref = model(tokens)
        assert torch.allclose(g(tokens), ref, atol=1e-5)      # the same model, replayed
    return G.serving_cost(g, tokens)


def test_the_honest_figure_counts_every_projection():
    s = serving("linear")
    # 4 DxD projections and the VxD head (the embedding table is a lookup), plus attention
    assert s["decode_flops_per_token"] >= 2 * (4 * D * D + V * D)


def test_rewriting_the_same_model_does_not_make_it_cheaper_to_serve():
    honest = serving("linear")
    for how in ("einsum", "flat", "constant"):
        s = serving(how)
        assert s is None or s["decode_flops_per_token"] >= honest["decode_flops_per_token"], (how, s, honest)
        assert s is None or s["kv_bytes_per_token"] >= honest["kv_bytes_per_token"], (how, s, honest)


class HalfByHand(Attn):
    """Two attention layers, the second written by hand (matmul, mask, softmax, matmul)."""

    def forward(self, idx):
        x = self.wte[idx]
        B = idx.size(0)
        for layer in range(2):
            q, k, v = (self.proj(x, n).view(B, T, 2, D // 2).transpose(1, 2) for n in ("q", "k", "v"))
            if layer == 0:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-1, -2)) / (D // 2) ** 0.5
                mask = torch.ones(T, T, dtype=torch.bool).tril()
                y = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, D), "o")
        return self.proj(x, "head")


def test_attention_written_by_hand_beside_the_kernel_has_no_serving_figures():
    """Counting only the kernel's calls, the hand-written layer's KV cache vanished: a model with
    two attention layers reported the KV bytes of one."""
    model = HalfByHand("linear").eval()
    tokens = torch.randint(0, V, (ROWS, T))
    with torch.no_grad():
        spec, consts = runtime.record_graph(model, tokens)
        g = G.load(json.dumps(spec), {k: v.detach().clone() for k, v in model.state_dict().items()}, consts,
                   rows=ROWS, seq_len=T, device="cpu")
        assert torch.allclose(g(tokens), model(tokens), atol=1e-5)
    assert G.hand_attention(g)
    assert G.serving_cost(g, tokens) is None


def test_the_honest_kernel_graph_is_not_taken_for_hand_attention():
    model = Attn("linear").eval()
    tokens = torch.randint(0, V, (ROWS, T))
    with torch.no_grad():
        spec, consts = runtime.record_graph(model, tokens)
    g = G.load(json.dumps(spec), {k: v.detach().clone() for k, v in model.state_dict().items()}, consts,
               rows=ROWS, seq_len=T, device="cpu")
    assert G.hand_attention(g) is None
