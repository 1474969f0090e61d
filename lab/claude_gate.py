"""The flywheel's last gate with ANTHROPIC_API_KEY: a small ensemble of Claude judges votes on
which generated samples read like plausible training text; a sample survives on a majority.

Each judge sees a batch of numbered samples and answers with one tool call listing the numbers
it would keep. The judges differ by their instruction (strict about fluency, about coherence with
the seed, about variety), so their errors are less alike than repeated calls of one prompt. A
failed call abstains (counted as keep: the gate never loses data because the API was down).
"""
from __future__ import annotations

from llm.client import LLMClient, LLMError, RetryPolicy

BATCH = 12  # samples per call: a few thousand tokens of context, few calls
SAMPLE_CHARS = 600  # characters of a sample shown (seed tail + continuation)
MAX_TOKENS = 512
PERSONAS = (  # one instruction per judge of the ensemble
    "Keep samples that are fluent: real words, plausible syntax for their kind of text.",
    "Keep samples whose continuation plausibly follows its seed (same topic, register, format).",
    "Keep samples that add something: reject boilerplate, lists of one repeated item, or gibberish.",
)
TOOL = {"name": "keep_samples", "description": "Record which numbered samples to keep.",
        "input_schema": {"type": "object", "properties": {"keep": {"type": "array", "items": {"type": "integer"}}},
                         "required": ["keep"]}}


def prompt(batch: list[dict]) -> str:
    parts = ["Generated continuations of real text prefixes, for possible use as training data. "
             "For each numbered sample, SEED is the real prefix and TEXT the generated part."]
    for i, s in enumerate(batch):
        parts.append(f"[{i}] SEED: {s['seed'][-200:]!r}\n    TEXT: {s['text'][:SAMPLE_CHARS]!r}")
    parts.append("Call keep_samples with the numbers of the samples to keep.")
    return "\n\n".join(parts)


class ClaudeGate:
    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None):
        # the judges' model (AUTORESEARCH_JUDGE_MODEL overrides), through the one LLM client
        self.llm = LLMClient("judge", model, api_key=api_key, base_url=base_url, retry=RetryPolicy(timeout=120.0))
        self.model = self.llm.model
        self.cost_usd, self.calls, self.errors = 0.0, 0, 0

    def _vote(self, persona: str, batch: list[dict]) -> set[int] | None:
        """Indices one judge keeps, or None when it abstains (a failed or malformed call)."""
        self.calls += 1
        try:
            reply = self.llm.create(max_tokens=MAX_TOKENS, system=persona, tools=[TOOL],
                                    tool_choice={"type": "tool", "name": TOOL["name"]},
                                    messages=[{"role": "user", "content": prompt(batch)}])
        except LLMError:
            self.errors += 1
            return None
        self.cost_usd += reply.cost_usd
        for call in reply.tool_calls:
            if call.name == TOOL["name"] and isinstance(call.input, dict):
                keep = call.input.get("keep")
                if isinstance(keep, list):
                    return {k for k in keep if isinstance(k, int) and 0 <= k < len(batch)}
        self.errors += 1
        return None

    def filter(self, samples: list[dict]) -> tuple[list[dict], int]:
        """(survivors, rejected): a sample is kept when a majority of the voting judges keep it."""
        kept = []
        for start in range(0, len(samples), BATCH):
            batch = samples[start:start + BATCH]
            votes = [self._vote(p, batch) for p in PERSONAS]
            for i, s in enumerate(batch):
                ayes = sum(1 for v in votes if v is None or i in v)  # an abstention keeps
                if 2 * ayes > len(votes):
                    kept.append(s)
        return kept, len(samples) - len(kept)
