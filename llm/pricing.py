"""Dollar cost of Anthropic API usage, per model, including prompt-cache reads and writes.

Prices are USD per million tokens, from Anthropic's pricing page (platform.claude.com/docs,
"Pricing": base input, 5-minute cache write, 1-hour cache write, cache hit, output). Check them
when adding a model; an unknown model is priced by its family (opus/sonnet/haiku) at the newest
known rate and flagged, never silently counted as free.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Price:
    input: float          # $/MTok, uncached input
    output: float         # $/MTok
    cache_write_5m: float  # $/MTok, cache_control ephemeral (default 5 minute TTL): 1.25x input
    cache_write_1h: float  # $/MTok, 1 hour TTL: 2x input
    cache_read: float     # $/MTok, cache hits and refreshes: 0.1x input


def _p(inp: float, out: float) -> Price:
    # Cache multipliers are the same for every current model (pricing page).
    return Price(inp, out, inp * 1.25, inp * 2.0, inp * 0.1)


# Model id prefix -> price. Longest matching prefix wins, so dated ids
# ("claude-sonnet-4-5-20250929") match their alias and "claude-opus-4-1" beats "claude-opus-4".
PRICES: dict[str, Price] = {
    "claude-fable-5-1": _p(10.0, 50.0),
    "claude-opus-5-5": _p(4.0, 20.0),
    "claude-opus-5": _p(5.0, 25.0),
    "claude-sonnet-5-5": _p(2.0, 10.0),
    "claude-sonnet-5": _p(2.0, 10.0),
    "claude-opus-4-8": _p(5.0, 25.0),
    "claude-opus-4-7": _p(5.0, 25.0),
    "claude-opus-4-6": _p(5.0, 25.0),
    "claude-opus-4-5": _p(5.0, 25.0),
    "claude-opus-4-1": _p(15.0, 75.0),
    "claude-opus-4": _p(15.0, 75.0),
    "claude-sonnet-4-6": _p(3.0, 15.0),
    "claude-sonnet-4-5": _p(3.0, 15.0),
    "claude-sonnet-4": _p(3.0, 15.0),
    "claude-3-7-sonnet": _p(3.0, 15.0),
    "claude-haiku-4-5": _p(1.0, 5.0),
    "claude-3-5-haiku": _p(0.80, 4.0),
    "claude-3-haiku": Price(0.25, 1.25, 0.30, 0.50, 0.03),
}
# Fallback by family word in the id, for models newer than this table.
FAMILY_FALLBACK = {"opus": PRICES["claude-opus-5"], "sonnet": PRICES["claude-sonnet-5"],
                   "haiku": PRICES["claude-haiku-4-5"]}
PER_TOKEN = 1e-6      # prices are per million tokens

_warned: set[str] = set()


def price_for(model: str) -> Price | None:
    """The price row for a model id, or None when even its family is unknown."""
    best = max((k for k in PRICES if model.startswith(k)), key=len, default=None)
    if best is not None:
        return PRICES[best]
    for family, price in FAMILY_FALLBACK.items():
        if family in model:
            if model not in _warned:
                _warned.add(model)
                log.warning("pricing: no price for %s; using the newest %s rate", model, family)
            return price
    if model not in _warned:
        _warned.add(model)
        log.warning("pricing: unknown model %s; its cost is not counted", model)
    return None


def usage_dict(usage) -> dict:
    """Normalise an SDK `Usage` object (or a dict) into our token counts.

    input = uncached input tokens (what the API calls input_tokens), cache_write = tokens written
    to the cache (split by TTL when the API says), cache_read = tokens served from the cache.
    """
    get = usage.get if isinstance(usage, dict) else (lambda k, d=None: getattr(usage, k, d))
    out = {"input": int(get("input_tokens", 0) or 0),
           "output": int(get("output_tokens", 0) or 0),
           "cache_read": int(get("cache_read_input_tokens", 0) or 0),
           "cache_write": int(get("cache_creation_input_tokens", 0) or 0),
           "cache_write_1h": 0}
    split = get("cache_creation", None)
    if split is not None:
        sget = split.get if isinstance(split, dict) else (lambda k, d=None: getattr(split, k, d))
        out["cache_write_1h"] = int(sget("ephemeral_1h_input_tokens", 0) or 0)
    return out


def cost_usd(model: str, tokens: dict) -> float:
    """Dollars for token counts as returned by usage_dict (or summed ones)."""
    price = price_for(model)
    if price is None:
        return 0.0
    write_1h = min(tokens.get("cache_write_1h", 0), tokens.get("cache_write", 0))
    write_5m = tokens.get("cache_write", 0) - write_1h
    dollars = (tokens.get("input", 0) * price.input + tokens.get("output", 0) * price.output
               + tokens.get("cache_read", 0) * price.cache_read
               + write_5m * price.cache_write_5m + write_1h * price.cache_write_1h)
    return dollars * PER_TOKEN


def add_tokens(total: dict, more: dict) -> dict:
    """Sum token dicts key by key (in place on `total`, which is also returned)."""
    for k, v in more.items():
        total[k] = total.get(k, 0) + v
    return total
