"""Inference on the loop's kept models: loading, KV-cached decoding, benchmark, speculative decoding."""
