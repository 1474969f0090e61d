"""The judge hierarchy: guard, trusted-metric judge, LLM judge, MetaJudge, human queue."""
