"""The LLM judge: Claude reviews the diff and the trusted result next to the rule judge.

It runs only with ANTHROPIC_API_KEY (the hierarchy checks), through the real `anthropic` SDK;
`base_url` (or ANTHROPIC_BASE_URL) points it elsewhere, which is how tests reach the local
Messages API server. The model must answer by calling one tool, `record_verdict`, so the verdict is
structured data, never parsed from prose. Any failure (API down, malformed reply) returns an
Opinion-less result with the error: the rule judge then decides alone, and the journal says why.

The metric is not the LLM's to decide: it sees the trusted figures and the band, and its value is
reading the diff — a change that games the evaluation, an explanation that does not fit the
result, needless complexity.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from agent import sdk_logs
from agent.judges.judge import Opinion
from llm import client as llm
from harness.experiment_record import ExperimentRecord

# llm/client.py's default model (the proposer's too); AUTORESEARCH_JUDGE_MODEL overrides.
DEFAULT_MODEL = llm.DEFAULT_MODEL
MAX_TOKENS = 1024
# The SDK retries these many times itself; the judge does not wait longer than that for an opinion
# (llm/client.py with patience 0: no retries of our own).
SDK_MAX_RETRIES = 2
REQUEST_TIMEOUT_S = 120.0
# Characters of the diff and of the history summary sent (a judge does not need a novel).
MAX_DIFF_CHARS = 12_000
HISTORY_ROWS = 12
STATUSES = ("keep", "discard", "contested")

SYSTEM = """You are the Judge of an autonomous LLM-pretraining research loop. An agent edits \
train.py (model, optimizer, training loop) to lower val_bpb within a fixed time budget; the \
evaluation in prepare.py is fixed. You review one experiment: its diff, hypothesis and the \
TRUSTED val_bpb (re-measured by the harness in a separate process), against the best so far and \
the run-to-run noise band. Decide keep, discard or contested (a gain too small to tell from noise, \
or a doubt only a human can settle). Rules: keep only gains beyond the noise band; all else equal \
simpler is better, so a tiny gain that adds much code is a discard and a deletion with an equal \
result is a keep; any sign the edit games the evaluation or the budget (touching evaluation, the \
validation data, the time budget, the seed) is a discard whatever the number says. Answer by \
calling record_verdict exactly once."""

VERDICT_TOOL = {
    "name": "record_verdict",
    "description": "Record your verdict on this experiment.",
    "input_schema": {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": list(STATUSES)},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "how sure you are, 0..1"},
            "rationale": {"type": "string", "description": "two or three sentences: why"},
            "concerns": {"type": "array", "items": {"type": "string"},
                         "description": "anything suspicious in the diff (may be empty)"},
        },
        "required": ["status", "confidence", "rationale"],
    },
}


@dataclass
class LLMResult:
    opinion: Opinion | None
    error: str | None = None
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    cost_usd: float = 0.0
    seconds: float = 0.0
    model: str = ""

    def as_dict(self) -> dict:
        d = self.opinion.as_dict() if self.opinion else {"judge": "llm", "status": None}
        return {**d, "error": self.error, "tokens": self.tokens, "cost_usd": self.cost_usd,
                "seconds": round(self.seconds, 3), "model": self.model}


class LLMJudge:
    def __init__(self, model: str | None = None, *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = SDK_MAX_RETRIES, timeout: float = REQUEST_TIMEOUT_S):
        self.llm = llm.LLMClient("judge", model, api_key=api_key, base_url=base_url,
                                 retry=llm.RetryPolicy(sdk_max_retries=max_retries, timeout=timeout))
        self.model = self.llm.model
        self.client = self.llm.client

    def review(self, *, diff: str, hypothesis: str, description: str, figures: dict,
               rule: Opinion, history: list[ExperimentRecord]) -> LLMResult:
        t0 = time.time()
        prompt = build_prompt(diff=diff, hypothesis=hypothesis, description=description, figures=figures,
                              rule=rule, history=history)
        try:
            reply = self.llm.create(
                max_tokens=MAX_TOKENS, system=SYSTEM, tools=[VERDICT_TOOL],
                tool_choice={"type": "tool", "name": VERDICT_TOOL["name"]},
                messages=[{"role": "user", "content": prompt}])
        except llm.LLMError as e:
            cause = e.cause or e
            why = f"{type(cause).__name__}: {getattr(cause, 'message', cause)}"
            sdk_logs.report("anthropic", f"LLM judge call failed ({why})")
            return LLMResult(None, why, seconds=time.time() - t0, model=self.model)
        res = LLMResult(None, None, reply.tokens, reply.cost_usd, time.time() - t0, self.model)
        try:
            res.opinion = parse_verdict(reply.content)
        except ValueError as e:
            res.error = f"malformed verdict: {e}"
        return res


def parse_verdict(content) -> Opinion:
    """The record_verdict call in a reply's content blocks, validated."""
    calls = [b for b in content if getattr(b, "type", None) == "tool_use" and b.name == VERDICT_TOOL["name"]]
    if not calls:
        raise ValueError("the reply has no record_verdict call")
    data = calls[0].input
    if not isinstance(data, dict):
        raise ValueError(f"record_verdict input is {type(data).__name__}, not an object")
    status = data.get("status")
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    try:
        conf = float(data.get("confidence"))
    except (TypeError, ValueError):
        raise ValueError(f"confidence {data.get('confidence')!r} is not a number") from None
    if not 0.0 <= conf <= 1.0:
        raise ValueError(f"confidence {conf} is outside 0..1")
    rationale = str(data.get("rationale") or "").strip()
    if not rationale:
        raise ValueError("empty rationale")
    concerns = [str(c) for c in data.get("concerns") or [] if str(c).strip()]
    return Opinion("llm", status, rationale, conf, {"concerns": concerns})


def build_prompt(*, diff, hypothesis, description, figures, rule: Opinion, history) -> str:
    rows = []
    for r in history[-HISTORY_ROWS:]:
        rows.append(f"  exp {r.n}: {r.status} trusted={r.trusted_bpb} {(r.description or '')[:80]}")
    d = diff if len(diff) <= MAX_DIFF_CHARS else diff[:MAX_DIFF_CHARS] + "\n... (diff truncated)"
    return (f"Experiment: {description}\nHypothesis: {hypothesis}\n\n"
            f"Figures (bpb, lower is better):\n{json.dumps(figures, indent=1, default=str)}\n\n"
            f"Rule judge says: {rule.status} ({rule.reason})\n\n"
            f"Recent history:\n" + ("\n".join(rows) or "  (none)") + f"\n\nDiff of train.py:\n{d}\n")
