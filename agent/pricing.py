"""Moved to harness/pricing.py (harness/llm.py, which the arms use too, needs the price table;
harness/ may not import agent/). Kept so existing imports go on working."""
from harness.pricing import (FAMILY_FALLBACK, PER_TOKEN, PRICES, Price, add_tokens,  # noqa: F401
                             cost_usd, price_for, usage_dict)
