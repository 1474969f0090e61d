"""The Claude proposer's tools and their execution against a sandboxed copy of train.py.

The model can read four project files and the experiment history, edit train.py (exact string
replacement or a full rewrite) and submit. Edits only ever touch `Workspace.source`, an in-memory
string; nothing on disk changes here (the loop commits the submitted source itself). Any bad call
(unknown tool, malformed input, a path other than train.py, an edit that does not apply) raises
ToolError, whose message goes back to the model as an is_error tool_result so it can try again.
"""

from __future__ import annotations

import json
import os
import re
from search import knobs
from harness.experiment_record import ExperimentRecord
from dataclasses import dataclass
from pathlib import Path

# Files the model may read; train.py is served from the in-memory working copy.
READABLE = ("program.md", "README.md", "prepare.py", "runtime.py", "attention.py", "graph_export.py", "train.py")
# The one file the model may change.
EDITABLE = "train.py"
# Longest text a read returns (characters); keeps one tool result from flooding the context.
READ_CHAR_LIMIT = 100_000
# Character budget of the condensed history (about 4k tokens).
HISTORY_CHAR_BUDGET = 16_000
# Longest diff shown for one experiment by read_history(experiment=N).
DIFF_CHAR_LIMIT = 8_000
# Hits search_archive returns, best first, and the changed lines shown for each.
ARCHIVE_HITS = 8
ARCHIVE_DIFF_LINES = 12
# results.tsv cannot hold long or multi-line descriptions.
DESCRIPTION_MAX_CHARS = 160

_PATH = {"type": "string", "description": "File name relative to the repository root, e.g. \"train.py\"."}
TOOLS: list[dict] = [
    {"name": "read_file",
     "description": "Read one project file. Allowed: program.md, README.md, prepare.py (fixed, "
                    "read-only: data, tokenizer, evaluation), runtime.py (fixed, read-only: device "
                    "set-up, compile, how the model is saved for the trusted evaluation), attention.py "
                    "(fixed, read-only: the attention backends and their probe), graph_export.py (fixed, read-only: how "
                    "the model is recorded as a graph of aten operators) and train.py (your working copy, "
                    "including the edits made so far).",
     "input_schema": {"type": "object", "properties": {"path": _PATH},
                      "required": ["path"], "additionalProperties": False}},
    {"name": "read_history",
     "description": "The experiment history: every past experiment with its status "
                    "(keep/discard/crash), val_bpb, memory, description, hypothesis and why it "
                    "was kept or discarded, condensed to fit. Pass `experiment` to see one "
                    "experiment in full, including its diff.",
     "input_schema": {"type": "object",
                      "properties": {"experiment": {"type": "integer", "description": "Experiment number n."}},
                      "additionalProperties": False}},
    {"name": "search_archive",
     "description": "Search every discarded or crashed experiment (description, hypothesis, why it "
                    "was discarded, and its diff) for all the given words, e.g. \"warmup\" or "
                    "\"MATRIX_LR\". Each hit shows its result, its changed lines, and whether a keep "
                    "since then changed its premise (then it may be worth revisiting). An exact repeat "
                    "of a tried configuration is refused before it runs.",
     "input_schema": {"type": "object",
                      "properties": {"query": {"type": "string", "description": "Words to look for."}},
                      "required": ["query"], "additionalProperties": False}},
    {"name": "suggest_knobs",
     "description": "Ask the knob sampler (Optuna TPE, fitted on every experiment so far) for its next "
                    "values of train.py's CAPS hyperparameters; they are written into your working "
                    "copy (your code edits stay). Use it for a hyperparameter question, and keep your "
                    "own turns for code ideas.",
     "input_schema": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "str_replace",
     "description": "Edit train.py: replace the one exact occurrence of old_str with new_str. "
                    "old_str must match the file exactly (whitespace included) and occur once.",
     "input_schema": {"type": "object",
                      "properties": {"path": _PATH, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
                      "required": ["path", "old_str", "new_str"], "additionalProperties": False}},
    {"name": "write_file",
     "description": "Replace the whole of train.py with `content`. Prefer str_replace for small changes.",
     "input_schema": {"type": "object",
                      "properties": {"path": _PATH, "content": {"type": "string"}},
                      "required": ["path", "content"], "additionalProperties": False}},
    {"name": "submit",
     "description": "Finish: submit the edited train.py as this experiment. `description` is one "
                    "short line for results.tsv; `hypothesis` says why it should lower val_bpb.",
     "input_schema": {"type": "object",
                      "properties": {"description": {"type": "string"}, "hypothesis": {"type": "string"}},
                      "required": ["description", "hypothesis"], "additionalProperties": False}},
]
_SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
_PY_TYPES = {"string": str, "integer": int, "object": dict}


class ToolError(Exception):
    """A refused or failed tool call; the message is returned to the model with is_error."""


@dataclass
class Submission:
    description: str
    hypothesis: str


def validate(name: str, args) -> dict:
    """Check a tool call against its schema; raise ToolError saying exactly what is wrong."""
    if name not in _SCHEMAS:
        raise ToolError(f"Unknown tool {name!r}. Tools: {', '.join(_SCHEMAS)}.")
    schema = _SCHEMAS[name]
    if not isinstance(args, dict):
        raise ToolError(f"{name}: input must be a JSON object, got {type(args).__name__}.")
    props = schema["properties"]
    missing = [k for k in schema.get("required", []) if k not in args]
    extra = [k for k in args if k not in props]
    if missing or extra:
        raise ToolError(f"{name}: missing {missing or 'nothing'}, unexpected {extra or 'nothing'}; "
                        f"expected fields: {list(props)}.")
    for k, v in args.items():
        want = _PY_TYPES[props[k]["type"]]
        if not isinstance(v, want) or isinstance(v, bool):
            raise ToolError(f"{name}: field {k!r} must be a {props[k]['type']}, got {type(v).__name__}.")
    return args


def _norm(path: str) -> str:
    return os.path.normpath(path.strip()).replace("\\", "/")


def _status_line(r: ExperimentRecord) -> str:
    bpb = r.decision_bpb
    mem = r.summary_figure("peak_vram_mb")
    parts = [f"#{'?' if r.n is None else r.n} {'?' if r.status is None else r.status}",
             f"val_bpb={bpb:.6f}" if bpb is not None else "val_bpb=-",
             f"mem={mem / 1024:.1f}GB" if mem is not None else None,
             f"commit={r.short or str(r.commit or '')[:7]}" if r.commit else None,
             f"| {r.description}"]
    if r.hypothesis:
        parts.append(f"| hypothesis: {r.hypothesis}")
    if r.crash_class:
        parts.append(f"| crash: {r.crash_class}")
    if r.decision_reason:
        parts.append(f"| why: {r.decision_reason}")
    return " ".join(p for p in parts if p).replace("\n", " ")


def _pending_line(p) -> str:
    """An experiment in flight (agent/coordinator.py InFlight)."""
    parts = [f"#{p.n} {p.status}", "val_bpb=-", f"commit={str(p.commit)[:7]}" if p.commit else None,
             f"| {p.description}"]
    return " ".join(x for x in parts if x).replace("\n", " ")


def condense_history(history: list[ExperimentRecord], best: dict | None, budget: int = HISTORY_CHAR_BUDGET,
                     pending: list = ()) -> str:
    """One line per experiment (then those in flight), newest kept first when the budget runs out,
    shown oldest first."""
    records = [r for r in history if r.is_experiment] + list(pending)
    if not records:
        return "No experiments yet: this is the first one after the baseline."
    head = f"{len(records)} experiments so far"
    if best:
        head += f"; best val_bpb {best.get('val_bpb')} at commit {str(best.get('commit') or '')[:7]}"
    lines, used = [], len(head)
    for r in reversed(records):
        line = _status_line(r) if isinstance(r, ExperimentRecord) else _pending_line(r)
        if len(line) > 600:
            line = line[:600] + "..."
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        used += len(line) + 1
    omitted = len(records) - len(lines)
    if omitted:
        head += f" ({omitted} oldest omitted; read_history with experiment=N shows any one)"
    return "\n".join([head + ":"] + lines[::-1])


DETAIL_KEYS = ("n", "status", "description", "hypothesis", "decision_reason", "crash_class", "trusted_bpb",
               "summary", "verdicts", "commit", "parent", "discarded_ref")


def experiment_detail(history: list[ExperimentRecord], n: int, pending: list = ()) -> str:
    for r in [*(r for r in history if r.is_experiment), *pending]:
        if r.n == n:
            got = r.value if isinstance(r, ExperimentRecord) else (lambda k: getattr(r, k, None))
            shown = {k: got(k) for k in DETAIL_KEYS if got(k) is not None}
            diff = r.text("diff") if isinstance(r, ExperimentRecord) else ""
            if len(diff) > DIFF_CHAR_LIMIT:
                diff = diff[:DIFF_CHAR_LIMIT] + f"\n...[{len(diff) - DIFF_CHAR_LIMIT} chars cut]"
            return json.dumps(shown, indent=1, default=str) + "\n--- diff ---\n" + (diff or "(none)")
    raise ToolError(f"read_history: no experiment {n}; known: {[r.n for r in [*history, *pending]][-50:]}.")


def search_archive(history: list[ExperimentRecord], query: str, limit: int = ARCHIVE_HITS) -> str:
    """Discarded and crashed experiments matching every word of `query`, most matches first."""
    words = [w.lower() for w in re.findall(r"\w+", query)]
    if not words:
        raise ToolError("search_archive: give one or more words to look for (a knob name, an idea).")
    records = [r for r in history if r.is_experiment]
    scored = []
    for r in records:
        if r.status not in ("discard", "crash"):
            continue
        changed = [l for l in r.text("diff").splitlines() if l[:1] in "+-" and not l.startswith(("+++", "---"))]
        text = " ".join([str(r.value(k) or "") for k in ("description", "hypothesis", "decision_reason",
                                                          "crash_class")] + changed).lower()
        if all(w in text for w in words):
            scored.append((sum(text.count(w) for w in words), r.number or 0, r, changed))
    if not scored:
        return f"No discarded or crashed experiment mentions all of {words}."
    scored.sort(key=lambda x: (-x[0], -x[1]))
    out = [f"{len(scored)} discarded/crashed experiment(s) match {words}; best {min(limit, len(scored))}:"]
    for _, n, r, changed in scored[:limit]:
        later = [k.n for k in records if k.status == "keep" and (k.number or 0) > n]
        premise = (f"premise changed: experiment(s) {later[:5]} kept since, so the parent differs now; "
                   f"it may be worth revisiting" if later else "no keep since: the same parent")
        shown = changed[:ARCHIVE_DIFF_LINES] + ([f"...({len(changed) - ARCHIVE_DIFF_LINES} more lines)"]
                                                if len(changed) > ARCHIVE_DIFF_LINES else [])
        out.append(f"{_status_line(r)}\n  {premise}\n  " + "\n  ".join(shown or ["(no diff recorded)"]))
    return "\n".join(out)


class Workspace:
    """The sandbox one proposal works in: an in-memory train.py plus read access to the repo."""

    def __init__(self, worktree: Path, program: str, base_source: str, start_source: str,
                 history: list[ExperimentRecord], best: dict | None, n: int = 0, seed: int = 0,
                 pending: list = ()):
        self.worktree = Path(worktree)
        self.program = program
        self.base_source = base_source          # the parent commit's train.py
        self.start_source = start_source        # where editing starts (a crashed proposal when fixing)
        self.source = start_source
        self.history = history
        self.pending = list(pending)        # experiments in flight (agent/coordinator.py InFlight)
        self.best = best
        self.edits = 0
        self.submitted: Submission | None = None
        self.n, self.seed = n, seed          # the experiment this proposal is for (the sampler's trial)

    def run(self, name: str, args) -> str:
        args = validate(name, args)
        return getattr(self, f"_tool_{name}")(**args)

    def _editable(self, path: str) -> None:
        if _norm(path) != EDITABLE:
            raise ToolError(f"Refused: {path!r} cannot be edited. Only train.py may change; "
                            "prepare.py and the other files are fixed (the evaluation must stay the same).")

    def _tool_read_file(self, path: str) -> str:
        p = _norm(path)
        if p not in READABLE:
            raise ToolError(f"read_file: {path!r} is not readable here; allowed: {', '.join(READABLE)}.")
        if p == "train.py":
            text = self.source
        elif p == "program.md":
            text = self.program
        else:
            try:
                text = (self.worktree / p).read_text(encoding="utf-8")
            except OSError as e:
                raise ToolError(f"read_file: cannot read {p}: {e.strerror or e}.")
        if len(text) > READ_CHAR_LIMIT:
            text = text[:READ_CHAR_LIMIT] + f"\n...[{len(text) - READ_CHAR_LIMIT} chars cut]"
        return text

    def _tool_read_history(self, experiment: int | None = None) -> str:
        if experiment is not None:
            return experiment_detail(self.history, experiment, self.pending)
        return condense_history(self.history, self.best, pending=self.pending)

    def _tool_search_archive(self, query: str) -> str:
        return search_archive(self.history, query)

    def _tool_suggest_knobs(self) -> str:
        from agent.proposers.base import ProposalError, ProposalRequest
        from agent.proposers.offline import OfflineProposer
        try:
            got = OfflineProposer().propose(ProposalRequest(
                n=self.n, worktree=self.worktree, train_source=self.source, program=self.program,
                history=self.history, pending=self.pending, best=self.best, seed=self.seed))
        except ProposalError as exc:
            raise ToolError(f"suggest_knobs: {exc}")
        self.source = got.source
        self.edits += 1
        return (f"train.py's knobs set by the sampler: {got.description.split(': ', 1)[-1]}. "
                f"Why: {got.hypothesis}")

    def _tool_str_replace(self, path: str, old_str: str, new_str: str) -> str:
        self._editable(path)
        if not old_str:
            raise ToolError("str_replace: old_str is empty; give the exact text to replace.")
        count = self.source.count(old_str)
        if count != 1:
            raise ToolError(f"str_replace: old_str occurs {count} times in train.py; it must occur exactly "
                            "once (copy it exactly from read_file, with enough context to be unique).")
        self.source = self.source.replace(old_str, new_str, 1)
        self.edits += 1
        return f"train.py edited ({len(old_str)} chars replaced by {len(new_str)})."

    def _tool_write_file(self, path: str, content: str) -> str:
        self._editable(path)
        if not content.strip():
            raise ToolError("write_file: content is empty; train.py must stay a complete program.")
        self.source = content
        self.edits += 1
        return f"train.py rewritten ({len(content.splitlines())} lines)."

    def _tool_submit(self, description: str, hypothesis: str) -> str:
        description, hypothesis = description.strip(), hypothesis.strip()
        if not description or "\n" in description or "\t" in description:
            raise ToolError("submit: description must be one non-empty line without tabs.")
        if len(description) > DESCRIPTION_MAX_CHARS:
            raise ToolError(f"submit: description is {len(description)} chars; keep it under "
                            f"{DESCRIPTION_MAX_CHARS} (details belong in the hypothesis).")
        if not hypothesis:
            raise ToolError("submit: hypothesis is empty; say why this should lower val_bpb.")
        if self.source == self.base_source:
            raise ToolError("submit: train.py is unchanged from the parent commit; edit it first.")
        if self.source == self.start_source and self.start_source != self.base_source:
            raise ToolError("submit: train.py is still the version that crashed; fix it first.")
        try:
            knobs.compile_source(self.source, "train.py")
        except SyntaxError as e:
            raise ToolError(f"submit: train.py does not parse: {e.msg} at line {e.lineno}. Fix it first.")
        self.submitted = Submission(description, hypothesis)
        return "Submitted."
