"""ClaudeProposer: Claude edits train.py through tool use and submits one experiment.

One propose() is one conversation: the system prompt (our role text plus program.md) and the tool
definitions form a stable prefix marked for prompt caching; the first user message carries the
experiment number, the condensed history, any feedback (a guard rejection or a crash log) and the
train.py to start from. The model reads, edits an in-memory copy (tools.py), and calls submit.

Failure handling, from the outside in:
- API errors that can pass (429, 529, other 5xx, 408/409, timeouts, connection errors) are retried:
  first by the SDK (max_retries), then by llm/client.py's loop with exponential backoff that
  honours retry-after. Once the API has been down for `api_patience` seconds in a row: ProposerUnavailable
  (the loop then uses the offline proposer for this experiment).
- 401/403 also mean ProposerUnavailable (a bad key does not heal); other 4xx: ProposalError.
- A model that loops without submitting: ProposalError after `max_tool_calls` tool calls, or
  after MAX_NUDGES replies that call no tool.
"""

from __future__ import annotations

import os

from agent import sdk_logs
from agent.proposers.base import Proposal, ProposalError, ProposalRequest, ProposerUnavailable
from agent.proposers.tools import TOOLS, ToolError, Workspace, condense_history
from agent.tracing import span_of
from llm import client as llm, pricing
from llm.client import retry_after as _retry_after  # noqa: F401  (tests and callers use this name)

# The default model and the retry rules are llm/client.py's (one for every role); --model or
# AUTORESEARCH_PROPOSER_MODEL overrides the model.
DEFAULT_MODEL = llm.DEFAULT_MODEL
# Output cap per reply: room for a full rewrite of train.py, and low enough that the SDK allows
# a non-streaming request.
MAX_TOKENS = 16_000
# Tool calls allowed in one proposal before we give up on it.
MAX_TOOL_CALLS = 30
# Replies without any tool call (the model just talking) tolerated before giving up.
MAX_NUDGES = 3
# Seconds the API may stay down before the loop falls back to the offline proposer.
API_PATIENCE = 600.0
SDK_MAX_RETRIES = llm.SDK_MAX_RETRIES
REQUEST_TIMEOUT = llm.REQUEST_TIMEOUT_S
BACKOFF_BASE = llm.BACKOFF_BASE

SYSTEM_PROMPT = """\
You are an autonomous ML researcher working on one file, train.py, a small GPT pretraining
script. Each experiment trains for a fixed wall-clock budget and is scored by val_bpb (validation
bits per byte, lower is better) from prepare.py's fixed evaluation. Your job in this conversation:
propose ONE experiment.

How to work:
- Use read_file and read_history to understand the code and what was already tried (including
  what was discarded, crashed or rejected, and why). Do not repeat a failed idea unchanged.
- Change train.py only, with str_replace (preferred) or write_file. prepare.py, program.md and
  README.md are read-only; edits to them are refused.
- Keep train.py a working program: same summary output, same build_model(config) entry point,
  no new packages, no network, no tricks with the evaluation, the time budget or the seed.
- Then call submit with a one-line description and your hypothesis. One idea per experiment.

The research program written by the humans who run this lab follows; it takes precedence."""


def _block_dict(block) -> dict:
    """An assistant content block as the dict we send back in the next request."""
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return block.model_dump(mode="json", exclude_none=True)


def first_message(req: ProposalRequest) -> str:
    parts = [f"Experiment {req.n}.", "History (condensed):", condense_history(req.history, req.best, pending=req.pending)]
    if req.fix_of is not None:
        parts += ["", "Your previous proposal crashed. It was:",
                  f"description: {req.fix_of.description}", f"hypothesis: {req.fix_of.hypothesis}",
                  "The last lines of its log:", req.feedback or "(no log)",
                  "train.py below is that crashed version; fix it (or simplify it) and submit."]
    elif req.feedback:
        parts += ["", "Feedback on your last proposal (it was not run):", req.feedback]
    start = req.fix_of.source if req.fix_of is not None else req.train_source
    parts += ["", "Current train.py (your working copy):", "```python", start, "```"]
    return "\n".join(parts)


class ClaudeProposer:
    name = "claude"
    cheap_redo = False   # a call costs money and minutes: a stale proposal is rebased

    def __init__(self, model: str | None = None, *, api_key: str | None = None,
                 base_url: str | None = None, api_patience: float = API_PATIENCE,
                 max_tool_calls: int = MAX_TOOL_CALLS, sdk_max_retries: int = SDK_MAX_RETRIES,
                 timeout: float = REQUEST_TIMEOUT, backoff_base: float = BACKOFF_BASE,
                 max_tokens: int = MAX_TOKENS, tracer=None):
        api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise ProposerUnavailable("ANTHROPIC_API_KEY is not set; use --proposer offline")
        self.api_patience = api_patience
        self.max_tool_calls = max_tool_calls
        self.max_tokens = max_tokens
        self.tracer = tracer
        retry = llm.RetryPolicy(sdk_max_retries=sdk_max_retries, timeout=timeout, patience=api_patience,
                                backoff_base=backoff_base)
        self.llm = llm.LLMClient("proposer", model, api_key=api_key, base_url=base_url, retry=retry,
                                 on_retry=lambda line: sdk_logs.report("anthropic", line))
        self.model = self.llm.model
        self.client = self.llm.client

    # ---- one proposal ----
    def propose(self, req: ProposalRequest) -> Proposal:
        start = req.fix_of.source if req.fix_of is not None else req.train_source
        ws = Workspace(req.worktree, req.program, req.train_source, start, req.history, req.best,
                       n=req.n, seed=req.seed, pending=req.pending)
        system = [{"type": "text", "text": f"{SYSTEM_PROMPT}\n\n<program.md>\n{req.program}\n</program.md>",
                   "cache_control": {"type": "ephemeral"}}]
        messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": first_message(req)}]}]
        # Per-proposal accounting (local, so concurrent proposals on one proposer do not mix).
        acct = {"tokens": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0},
                "cost": 0.0, "calls": 0, "retries": 0}
        tool_calls = nudges = 0
        while True:
            resp = self._create(system, messages, acct)
            messages.append({"role": "assistant", "content": [_block_dict(b) for b in resp.content]})
            uses = [b for b in resp.content if b.type == "tool_use"]
            if resp.stop_reason == "refusal":
                raise ProposalError("the model refused to propose an edit")
            if not uses:
                nudges += 1
                if nudges > MAX_NUDGES:
                    raise ProposalError(f"the model stopped {nudges} times without calling submit")
                hint = ("Your reply hit the output limit. Make smaller edits with str_replace."
                        if resp.stop_reason == "max_tokens" else "")
                messages.append({"role": "user", "content": [{"type": "text", "text":
                                 f"{hint} Use the tools to edit train.py, then call submit.".strip()}]})
                continue
            results = []
            for use in uses:
                tool_calls += 1
                results.append(self._run_tool(ws, use))
                if ws.submitted:
                    break
            if ws.submitted:
                return self._proposal(ws, tool_calls, acct)
            if tool_calls >= self.max_tool_calls:
                raise ProposalError(f"no submit after {tool_calls} tool calls (limit {self.max_tool_calls})")
            # Every tool_use needs a tool_result in the next user turn, even the skipped ones.
            answered = {r["tool_use_id"] for r in results}
            results += [{"type": "tool_result", "tool_use_id": u.id, "is_error": True,
                         "content": "Not run: an earlier call in this turn ended it."}
                        for u in uses if u.id not in answered]
            messages.append({"role": "user", "content": results})

    def _proposal(self, ws: Workspace, tool_calls: int, acct: dict) -> Proposal:
        return Proposal(description=ws.submitted.description, hypothesis=ws.submitted.hypothesis,
                        source=ws.source, proposer=self.name, model=self.model,
                        tokens=dict(acct["tokens"]), cost_usd=acct["cost"],
                        notes=f"{acct['calls']} API calls, {tool_calls} tool calls, {ws.edits} edits, "
                              f"{acct['retries']} retried failures")

    def _run_tool(self, ws: Workspace, use) -> dict:
        with span_of(self.tracer, f"tool.{use.name}", {"input": use.input}) as sp:
            try:
                text, is_error = ws.run(use.name, use.input), False
            except ToolError as e:
                text, is_error = str(e), True
            sp.log(output={"is_error": is_error, "result": text[:500]})
        block = {"type": "tool_result", "tool_use_id": use.id, "content": text}
        if is_error:
            block["is_error"] = True
        return block

    # ---- the API, with caching, accounting and retries ----
    def _request(self, system: list, messages: list) -> dict:
        # A moving cache breakpoint on the newest block: each turn re-reads the conversation so far
        # from the cache instead of paying for it again. Copies, so the history stays clean.
        msgs = [dict(m) for m in messages]
        last = dict(msgs[-1]["content"][-1])
        last["cache_control"] = {"type": "ephemeral"}
        msgs[-1]["content"] = list(msgs[-1]["content"][:-1]) + [last]
        return dict(model=self.model, max_tokens=self.max_tokens, system=system, tools=TOOLS, messages=msgs)

    def _create(self, system: list, messages: list, acct: dict):
        kwargs = self._request(system, messages)
        with span_of(self.tracer, "claude.messages", {"model": self.model, "messages": len(messages)}) as sp:
            try:
                reply = self.llm.create(**kwargs)
            except llm.LLMUnavailable as e:
                raise ProposerUnavailable(str(e)) from e
            except llm.LLMRequestError as e:
                raise ProposalError(str(e)) from e
            pricing.add_tokens(acct["tokens"], {k: v for k, v in reply.tokens.items() if k != "cache_write_1h"})
            acct["cost"] += reply.cost_usd
            acct["calls"] += 1
            acct["retries"] += reply.retries
            sp.log(output={"stop_reason": reply.stop_reason, "tools": [c.name for c in reply.tool_calls]},
                   tokens=reply.tokens, cost=reply.cost_usd)
            return reply
