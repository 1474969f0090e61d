"""harness/clock.py (the summary block): the summary block, read in code with the contract's padding."""
import math

from harness.clock import parse_summary

# The keys the seed's program.md promises, in order.
PROMISED = ("val_bpb", "training_seconds", "total_seconds", "peak_vram_mb", "mfu_percent",
            "total_tokens_M", "num_steps", "num_params_M", "depth")

BLOCK = """step 00953 | loss 3.1
---
val_bpb:          0.997900
training_seconds: 300.1
total_seconds:    325.9
peak_vram_mb:     45060.2
mfu_percent:      39.80
total_tokens_M:   499.6
num_steps:        953
num_params_M:     50.3
depth:            8
eval_seconds:     12.3
attn_backend:     sdpa
device:           cpu
"""


def test_contract_block():
    s = parse_summary(BLOCK)
    assert s["val_bpb"] == 0.9979 and s["num_steps"] == 953 and isinstance(s["num_steps"], int)
    assert s["peak_vram_mb"] == 45060.2 and s["attn_backend"] == "sdpa" and s["device"] == "cpu"
    assert [k for k in PROMISED if k not in s] == []


def test_exit_noise_after_the_block_is_not_a_key():
    s = parse_summary(BLOCK + "nanobind: leaked 4 instances!\n - leaked type \"X\"\n")
    assert "nanobind" not in s and s["device"] == "cpu"


def test_last_block_wins_and_earlier_dashes_are_ignored():
    text = "---\nnot a summary\n" + BLOCK.replace("0.997900", "1.500000") + BLOCK
    assert parse_summary(text)["val_bpb"] == 0.9979


def test_no_block_or_no_metric():
    assert parse_summary("Traceback (most recent call last):\nValueError: x\n") is None
    assert parse_summary("---\ntraining_seconds: 300.1\n") is None
    assert parse_summary("") is None


def test_nan_and_missing_keys_are_visible():
    s = parse_summary("---\nval_bpb:          nan\ndepth:            4\n")
    assert math.isnan(s["val_bpb"])
    assert "training_seconds" not in s and "depth" in s


def test_unpadded_block_is_read_loosely():
    assert parse_summary("---\nval_bpb: 1.25\nnum_steps: 3\n") == {"val_bpb": 1.25, "num_steps": 3}
