"""The arms' two uses of Claude, both through llm/client.py (model: AUTORESEARCH_ARMS_MODEL).

- `ClaudePolicy` (the claude arm): asks for n knob configurations given every result so far;
  random search fills any shortfall.
- `LLMIdeas` (the hybrid arm's default ideas, search/hybrid.py): asks once per run for
  a few code ideas for train.py, each a list of exact replacements, through a forced tool call so
  the ideas are structured data, never parsed from prose.
"""
from __future__ import annotations

import json

from llm import client as llm
from search.ideas import Idea, IdeaBatch
from search.space import Space

# Output caps: a list of configurations, and a few ideas with their edits.
POLICY_MAX_TOKENS = 4000
IDEAS_MAX_TOKENS = 8000

IDEAS_TOOL = {
    "name": "record_ideas",
    "description": "Record your code ideas for train.py.",
    "input_schema": {
        "type": "object",
        "properties": {"ideas": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "one line: the idea and why it should help"},
                "edits": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"old": {"type": "string", "description": "exact text of train.py, "
                                                  "occurring once"},
                                   "new": {"type": "string"}},
                    "required": ["old", "new"]}},
                "knobs": {"type": "object", "description": "CAPS constants to set, outside the searched ones"},
            },
            "required": ["description", "edits"]}}},
        "required": ["ideas"],
    },
}


def ideas_prompt(source: str, space: Space, n: int) -> str:
    ranges = "\n".join(f"- {k}: {v[0]} in {v[1:]}" for k, v in space.to_json().items())
    return (f"You are improving a small GPT pretraining script, train.py (below). Lower val_bpb after "
            f"a fixed number of optimizer steps is better. A hyperparameter sampler (Optuna TPE) sets "
            f"these knobs; do not change them, it will:\n{ranges}\n\n"
            f"Propose {n} different code ideas it cannot express: changes to the model, the optimizer "
            f"or the schedule (you may also set other CAPS constants through `knobs`). Each idea is a "
            f"list of exact replacements (`old` must occur exactly once in train.py). Keep the "
            f"evaluation, the time budget, the seed and the printed summary as they are. Answer by "
            f"calling record_ideas once.\n\n```python\n{source}\n```\n")


class LLMIdeas:
    """The hybrid's default ideas callable: one forced record_ideas call per arm run."""

    def __init__(self, model: str | None = None, *, client: llm.LLMClient | None = None):
        self.llm = client or llm.LLMClient("arms", model)

    def __call__(self, source: str, space: Space, n: int) -> IdeaBatch:
        batch = IdeaBatch([], model=self.llm.model)
        try:
            reply = self.llm.create(max_tokens=IDEAS_MAX_TOKENS, tools=[IDEAS_TOOL],
                                    tool_choice={"type": "tool", "name": IDEAS_TOOL["name"]},
                                    messages=[{"role": "user", "content": ideas_prompt(source, space, n)}])
        except llm.LLMError as e:
            batch.errors.append(str(e))
            return batch
        batch.tokens, batch.cost_usd = reply.tokens, reply.cost_usd
        calls = [c for c in reply.tool_calls if c.name == IDEAS_TOOL["name"]]
        items = calls[0].input.get("ideas") if calls and isinstance(calls[0].input, dict) else None
        if not isinstance(items, list):
            batch.errors.append("the reply has no record_ideas call with a list of ideas")
            return batch
        for i, item in enumerate(items[:n]):
            try:
                edits = [(str(e["old"]), str(e["new"])) for e in item.get("edits") or []]
                fixed = item.get("knobs") or {}
                if not isinstance(fixed, dict):
                    raise TypeError("knobs is not an object")
                batch.ideas.append(Idea(f"idea{i + 1}", str(item.get("description", ""))[:200], edits, fixed))
            except (AttributeError, KeyError, TypeError) as e:
                batch.errors.append(f"idea {i + 1} malformed: {type(e).__name__}: {e}")
        return batch


class ClaudePolicy:
    """Asks Claude for n configurations given every result so far; random fills any shortfall."""

    def __init__(self, space: Space, model: str | None = None, client=None):
        self.space = space
        self.llm = llm.LLMClient("arms", model, client=client)   # client: an anthropic.Anthropic to use
        self.model = self.llm.model
        self.tokens = {"input": 0, "output": 0}
        self.errors: list[str] = []

    def prompt(self, n: int, history: list[dict]) -> str:
        ranges = "\n".join(f"- {k}: {v[0]} in {v[1:]}" for k, v in self.space.to_json().items())
        done = sorted((h for h in history if h.get("val_bpb") is not None), key=lambda h: h["val_bpb"])
        lines = [json.dumps({"config": h["config"], "steps": h["steps"], "val_bpb": round(h["val_bpb"], 5)})
                 for h in done[:30]]
        crashed = [json.dumps(h["config"]) for h in history if h.get("val_bpb") is None][:10]
        return (f"You are tuning hyperparameters of a small GPT pretraining script (train.py). "
                f"Lower val_bpb is better; results at fewer steps are noisier, earlier views.\n"
                f"Search space:\n{ranges}\n\nBest results so far (up to 30):\n"
                + ("\n".join(lines) or "(none yet)")
                + ("\n\nConfigs that crashed:\n" + "\n".join(crashed) if crashed else "")
                + f"\n\nPropose {n} new, diverse configurations likely to reach a lower val_bpb. "
                f"Reply with only a JSON array of {n} objects, each with exactly the keys "
                f"{', '.join(self.space.names)}.")

    def __call__(self, n: int, history: list[dict]) -> list[dict]:
        try:
            reply = self.llm.create(max_tokens=POLICY_MAX_TOKENS,
                                    messages=[{"role": "user", "content": self.prompt(n, history)}])
            self.tokens["input"] += reply.tokens["input"]
            self.tokens["output"] += reply.tokens["output"]
            return self.parse(reply.text)[:n]
        except Exception as e:                       # API down or a malformed reply: random fills in
            self.errors.append(f"{type(e).__name__}: {e}")
            return []

    def parse(self, text: str) -> list[dict]:
        start, end = text.find("["), text.rfind("]")
        if start < 0 or end < start:
            raise ValueError("no JSON array in the reply")
        items = json.loads(text[start:end + 1])
        return [self.clip(item) for item in items
                if isinstance(item, dict) and set(self.space.names) <= set(item)]

    def clip(self, item: dict) -> dict:
        cfg = {}
        for name, spec in self.space.specs.items():
            v = item[name]
            if spec.kind == "choice":
                cfg[name] = v if v in spec.choices else spec.choices[0]
            elif spec.kind == "int":
                cfg[name] = int(min(spec.high, max(spec.low, round(float(v)))))
            else:
                cfg[name] = float(min(spec.high, max(spec.low, float(v))))
        return cfg
