"""
Fixed attention plumbing for autoresearch, beside runtime.py (which re-exports what train.py calls:
attention, pick_attention). The research loop never edits this file (the guard lets only train.py
change); train.py may stop using it and write its own attention.

    backends        attn_fa3 (FlashAttention-3 from the kernels hub), attn_flex, attn_sdpa, attn_naive
    the cascade     cascade(): the backends to try on a device, best first (FA3 left out on sm_12x)
    the probe       probe_attention() / pick_attention(): the first backend that runs forward and
                    backward, compiled where compile is on, on the dtypes the model feeds, and agrees
                    with a float64 reference
    FA3 loading     load_fa3(): a pinned version, trust for one repository, no minutes of retries
                    when the hub is unreachable (go_offline_if_hub_unreachable)
    plain_aten()    the plain aten backend for a while (runtime.save_model records the graph with it)
"""

import contextlib
import inspect
import os
import sys
import time

import torch
import torch.nn.functional as F

# What runs eagerly because it did not compile, "name: reason" (the probe's and runtime.compiled()'s;
# the run's summary prints them).
COMPILE_NOTES = []


def one_line(e):
    """One line for an exception: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"


# Every backend takes q [B,T,H,D], k and v [B,T,Hkv,D] (Hkv divides H: GQA) and a window w: query
# i sees keys j with 0 <= i-j <= w; w < 0 means the full causal context.

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
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(T, window, q.device), enable_gqa=gqa)
    return y.transpose(1, 2)


_flex_masks = {}  # (T, window, device_key) -> BlockMask, built by prepare_backend()


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
FA3_REPO = "kernels-community/flash-attn3"  # FlashAttention-3 build on the kernels hub
FA3_KERNEL_VERSION = 1  # pinned major version (kernels >= 0.15 refuses to load without one)
HUB_CHECK_SECONDS = 3.0  # the hub must answer a DNS lookup and a TCP connect within this, else offline


def attn_fa3(q, k, v, window):
    """FlashAttention-3 (Hopper) from the kernels hub: native windows and GQA, bf16 only."""
    dtype = q.dtype
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    out = _fa3.flash_attn_func(q, k, v, causal=True, window_size=(window, 0) if window >= 0 else (-1, -1))
    return (out[0] if isinstance(out, tuple) else out).to(dtype)  # some builds add the log-sum-exp


BACKENDS = {"fa3": attn_fa3, "flex": attn_flex, "sdpa": attn_sdpa, "naive": attn_naive}
_backend = attn_sdpa  # the backend in force; pick_attention() chooses one


def attention(q, k, v, window):
    return _backend(q, k, v, window)


def hub_unreachable_reason(endpoint=None, deadline=HUB_CHECK_SECONDS):
    """None when the HF hub accepts a TCP connection within `deadline` seconds, else why not.
    DNS runs in a thread (getaddrinfo ignores socket timeouts), so a dropped packet costs seconds."""
    import socket
    import threading
    from urllib.parse import urlparse
    url = urlparse(endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname, url.port or (80 if url.scheme == "http" else 443)
    found, t0 = {}, time.monotonic()

    def resolve():
        try:
            found["addr"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][:2]
        except OSError as e:
            found["error"] = e
    thread = threading.Thread(target=resolve, daemon=True)
    thread.start()
    thread.join(deadline)
    if "addr" not in found:
        return f"cannot resolve {host}: {found.get('error', 'timed out')}"
    try:
        socket.create_connection(found["addr"], timeout=max(0.1, deadline - (time.monotonic() - t0))).close()
    except OSError as e:
        return f"cannot connect to {host}:{port}: {e}"


def go_offline_if_hub_unreachable():
    """HF_HUB_OFFLINE=1 when the hub cannot be reached, so a kernels load uses the local cache and
    fails at once instead of retrying for minutes. Already set (every sandboxed run): no network."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        reason = "HF_HUB_OFFLINE is set"
    elif (reason := hub_unreachable_reason()) is None:
        return None
    else:
        os.environ["HF_HUB_OFFLINE"] = "1"
        print(f"attention: HF hub unreachable ({reason}): HF_HUB_OFFLINE=1, FA3 only from the local cache")
    if "huggingface_hub.constants" in sys.modules:  # it read the variable at import: tell it too
        sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE = True
    return reason


def load_fa3():
    """Load FA3 through `kernels`: pinned version, and trust granted to this one repository only."""
    global _fa3
    if _fa3 is not None:
        return
    from kernels import get_kernel  # no kernels package: fail before any network check
    go_offline_if_hub_unreachable()
    params = inspect.signature(get_kernel).parameters
    kwargs = {"version": FA3_KERNEL_VERSION} if "version" in params else {}
    if "trust_remote_code" in params:
        kwargs["trust_remote_code"] = [FA3_REPO]
    try:
        module = get_kernel(FA3_REPO, **kwargs)
    except TypeError:  # a kernels release that takes trust_remote_code only as a bool
        module = get_kernel(FA3_REPO, **dict(kwargs, trust_remote_code=True))
    _fa3 = module if hasattr(module, "flash_attn_func") else module.flash_attn_interface


def prepare_backend(name, T, windows, device):
    """Whatever a backend needs before its first call (the FA3 kernel, block masks); raises if unusable."""
    if name == "fa3":
        if device.type != "cuda":
            raise RuntimeError("FA3 needs a CUDA device")
        load_fa3()
    elif name == "flex":
        from torch.nn.attention.flex_attention import create_block_mask
        for w in set(windows):
            def mask_mod(b, h, qi, kj, w=w):
                return (kj <= qi) & ((qi - kj <= w) if w >= 0 else (kj >= 0))
            _flex_masks[(T, w, device_key(device))] = create_block_mask(mask_mod, None, None, T, T, device=str(device))
    elif name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; known: {', '.join(BACKENDS)}")


def set_backend(name, T=None, windows=(), device=torch.device("cpu")):
    global _backend
    if T is not None:
        prepare_backend(name, T, windows, device)
    _backend = BACKENDS[name]


def attention_candidates(device):
    """(the cascade best first, {backend: why it is left out}). AUTORESEARCH_ATTN forces one."""
    forced = os.environ.get("AUTORESEARCH_ATTN")
    if forced:
        return [forced], {}
    return cascade(torch.cuda.get_device_capability(device) if device.type == "cuda" else None)


def cascade(capability):
    """The backends to try on a CUDA device of this (major, minor) capability; None: CPU."""
    if capability is None:
        return ["sdpa", "naive"], {}
    major, minor = capability
    if major == 12:  # Blackwell sm_12x (GB10, RTX 50xx): no FA3 build, and FA3 under compile fails there
        return ["flex", "sdpa"], {"fa3": f"sm_{major}{minor} (Blackwell GB10 / RTX 50xx): no FA3 build"}
    return ["fa3", "flex", "sdpa"], {}  # kernels' arch check refuses FA3 where no build exists


def model_attention_dtypes(model, autocast, device, tokens=16):
    """The (q, k, v) dtypes each layer of `model` hands to attention() under `autocast`: one short
    forward with a recording backend in place, so the probe feeds what training will feed."""
    global _backend
    seen, previous = set(), _backend

    def record(q, k, v, window):
        seen.add((q.dtype, k.dtype, v.dtype))
        return torch.zeros_like(q)
    idx = torch.zeros(1, min(tokens, model.cfg["sequence_len"]), dtype=torch.long, device=device)
    _backend = record
    try:
        with torch.no_grad(), autocast:
            model(idx)
    finally:
        _backend = previous
    return sorted(seen, key=str)


def check_attention(fn, device, autocast, n_head, n_kv_head, head_dim, T, windows, dtypes, batch=1, tolerance=5e-2):
    """Run fn forward+backward on q, k, v of the given dtypes for every window; return the worst
    error against the float64 reference; raise when it is not below `tolerance` (bf16 inputs)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(batch, T, h, head_dim, generator=g).to(device, dt).requires_grad_()
               for h, dt in zip((n_head, n_kv_head, n_kv_head), dtypes))
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



def probe_attention(device, autocast, n_head, n_kv_head, head_dim, T, windows, compile_on,
                    dtypes=((torch.float32,) * 3,)):
    """The first backend of the cascade that runs forward+backward (compiled if compile is on) on
    inputs of each (q, k, v) dtype triple in `dtypes` and agrees with the float64 reference; print
    why each other one was left out. Where none works under compile (a broken compiler, a forced
    backend that does not compile), the first that works eagerly, flex last (eager flex materialises
    the scores): the model's compile then falls back to eager too (compiled()), and the run goes on."""
    names, skipped = attention_candidates(device)
    for name, why in skipped.items():
        print(f"attention: {name} skipped: {why}")
    eager_ok = []
    for name in names:
        try:
            set_backend(name, T, windows, device)
            for dts in dtypes:
                check_attention(attention, device, autocast, n_head, n_kv_head, head_dim, T, windows, dts)
        except Exception as e:  # any failure means: try the next backend
            print(f"attention: {name} rejected: {one_line(e)}")
            continue
        eager_ok.append(name)
        try:
            if compile_on:
                fn = torch.compile(attention, dynamic=False)
                for dts in dtypes:
                    check_attention(fn, device, autocast, n_head, n_kv_head, head_dim, T, windows, dts)
        except Exception as e:
            print(f"attention: {name} rejected under compile: {one_line(e)}")
            continue
        set_backend(name)
        return name
    if not eager_ok:
        raise RuntimeError("no attention backend works on this device")
    name = sorted(eager_ok, key=lambda n: n == "flex")[0]
    print(f"attention: none works under compile; {name} runs eagerly (COMPILE FAILED for attention)")
    COMPILE_NOTES.append(f"attention: no backend compiles, {name} eager")
    set_backend(name)
    return name


def pick_attention(model, autocast, device, compile_on):
    """probe_attention() for a train.py model (its cfg: n_head, n_kv_head, head_dim, sequence_len;
    its windows), fed the dtypes that model hands to attention()."""
    c = model.cfg
    return probe_attention(device, autocast, c["n_head"], c["n_kv_head"], c["head_dim"], c["sequence_len"],
                           model.windows, compile_on, model_attention_dtypes(model, autocast, device))


@contextlib.contextmanager
def plain_aten():
    """SDPA, plain aten operators, as the backend while the block runs (the evaluator replays
    nothing else); the backend in force before is put back."""
    global _backend
    previous, _backend = _backend, attn_sdpa
    try:
        yield
    finally:
        _backend = previous
