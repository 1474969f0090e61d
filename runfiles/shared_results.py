"""What a run offers to share, typed for the report and the dashboard: where imported experiments
came from (imported.json, agent/import_run.py), the final best checked at a longer budget
(report/validation.json, agent/validate.py), and what each bpb gained cost (from the journal).

Read from disk these are data: `read` never raises, and a value of the wrong type reads as None.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.results_table import as_dict, as_str, bpb_figure, figure_text, fnum
from harness.experiment_record import ExperimentRecord

IMPORTED_JSON = "imported.json"
# The morning report's folder in a run folder (agent/report.py) and its files written by others.
REPORT_DIR = "report"
VALIDATION_JSON = f"{REPORT_DIR}/validation.json"
ABLATIONS = "ablations.json"   # in REPORT_DIR: agent/report_ablate.py's leave-one-out results
# Verdicts of a validation (agent/validate.py decides which).
VERDICTS = ("holds", "shrinks", "reverses", "unmeasured")
# An imported run's hardware is a short label (H100, A100-80GB, RTX 4090) taken from a branch name
# or an option: what else it holds is dropped, so no terminal or page reads it as markup or control.
HARDWARE_DROP = re.compile(r"[^A-Za-z0-9 ._+()-]")
MAX_HARDWARE = 40


def clean_hardware(v) -> str | None:
    """The hardware label as imported.json keeps it, or None when nothing of it is left."""
    if not isinstance(v, str):
        return None
    return " ".join(HARDWARE_DROP.sub("", v).split())[:MAX_HARDWARE].strip() or None


def _read(path: Path) -> dict | None:
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _floats(v) -> list[float]:
    return [float(x) for x in v if fnum(x) is not None] if isinstance(v, list) else []


@dataclass(frozen=True)
class ImportedInfo:
    """imported.json: the first `rows` experiments of the tag are another run's, imported.
    `tip`: the last kept commit, which the tag continues; `base`: the tag's base, this project's own
    files on top of it (None: imported before the base existed); `hardware`: what the original run
    ran on (None: unknown)."""
    repo: str | None
    branch: str | None
    tip: str | None
    rows: int
    budget: float | None
    missing_commits: list = field(default_factory=list)
    hardware: str | None = None
    base: str | None = None
    results: str | None = None

    @classmethod
    def read(cls, run_dir: Path) -> "ImportedInfo | None":
        d = _read(Path(run_dir) / IMPORTED_JSON)
        if d is None:
            return None
        rows = fnum(d.get("rows"))
        missing = d.get("missing_commits")
        return cls(as_str(d.get("repo")), as_str(d.get("branch")), as_str(d.get("tip")), int(rows or 0),
                   fnum(d.get("budget")), [m for m in missing if isinstance(m, str)] if isinstance(missing, list) else [],
                   clean_hardware(d.get("hardware")), as_str(d.get("base")), as_str(d.get("results")))

    def line(self) -> str:
        budget = f"{self.budget:g} s budget" if self.budget else "budget unknown"
        on = f"; {self.hardware}" if self.hardware else ""
        gone = f"; {len(self.missing_commits)} discarded commit(s) no longer in the repository" \
            if self.missing_commits else ""
        return (f"experiments 1-{self.rows} are imported from {self.branch} ({self.repo}{on}; {budget}){gone}: the "
                "original run's figures, on its machine, unsealed and not re-evaluated; never compared with "
                "this tag's own measurements, which start with its own baseline (this project's train.py), "
                "the imported tip judged against it like any proposal")


@dataclass(frozen=True)
class Side:
    """One side of a validation: a commit and its runs' figures at the longer budget."""
    commit: str | None
    runs: list[float]
    failed: list[str]                 # why a run gave no figure

    @property
    def mean(self) -> float | None:
        return sum(self.runs) / len(self.runs) if self.runs else None

    @classmethod
    def of(cls, d) -> "Side":
        d = as_dict(d)
        failed = d.get("failed")
        return cls(as_str(d.get("commit")), _floats(d.get("runs")),
                   [f for f in failed if isinstance(f, str)] if isinstance(failed, list) else [])


@dataclass(frozen=True)
class Validation:
    """report/validation.json: the final best and the base re-run at k x the budget."""
    k: float | None
    budget: float | None              # seconds per run at the longer budget
    seeds: list
    final: Side
    base: Side
    gain_short: float | None          # base - final in the run (the tag's own figures)
    gain_long: float | None           # the same at k x the budget, mean over the seeds
    se_long: float | None             # its standard error (None with one seed a side)
    verdict: str                      # holds | shrinks | reverses | unmeasured
    reason: str
    steps: int | None = None          # a --smoke tag's runs: optimizer steps at k x its own

    @classmethod
    def read(cls, run_dir: Path) -> "Validation | None":
        d = _read(Path(run_dir) / VALIDATION_JSON)
        if d is None:
            return None
        verdict = as_str(d.get("verdict"))
        seeds = d.get("seeds")
        return cls(fnum(d.get("k")), fnum(d.get("budget")), seeds if isinstance(seeds, list) else [],
                   Side.of(d.get("final")), Side.of(d.get("base")), fnum(d.get("gain_short")),
                   fnum(d.get("gain_long")), fnum(d.get("se_long")),
                   verdict if verdict in VERDICTS else "unmeasured", as_str(d.get("reason")) or "",
                   d.get("steps") if isinstance(d.get("steps"), int) and not isinstance(d.get("steps"), bool) else None)

    def line(self) -> str:
        k = f"{self.k:g}x" if self.k else "?x"
        long = f"{self.gain_long:+.6f}" if self.gain_long is not None else "-"
        se = f" (se {self.se_long:.6f})" if self.se_long is not None else ""
        short = f"{self.gain_short:+.6f}" if self.gain_short is not None else "-"
        at = f"{self.steps} steps" if self.steps else f"{self.budget or 0:g} s"
        return (f"at {k} the budget ({at}, {len(self.seeds)} seed(s) a side) the gain "
                f"{self.verdict.upper()}: {long}{se} vs {short} in the run. {self.reason[:1].upper()}{self.reason[1:]}.")


@dataclass(frozen=True)
class CostPerGain:
    """The tag's own experiments (imported ones left out): the gain from its baseline to its best
    kept figure, and what it cost in LLM dollars and device-hours (training + trusted evaluation)."""
    baseline: float | None
    best: float | None
    dollars: float
    device_hours: float

    @classmethod
    def of(cls, records: list[ExperimentRecord]) -> "CostPerGain":
        own = [r for r in records if not r.imported]
        def bpb(r):   # an impossible figure (1e308, negative) is no result (harness/results_table.py bpb_figure)
            return bpb_figure(r.decision_bpb)
        base = next((bpb(r) for r in own if r.is_baseline and r.status == "keep"), None)
        if base is None:
            base = next((bpb(r) for r in own if r.status == "keep"), None)
        kept = [bpb(r) for r in own if r.status == "keep" and bpb(r) is not None]
        seconds = sum((r.timing("run") or 0.0) + (r.timing("eval") or 0.0) for r in own)
        return cls(base, min(kept) if kept else None, sum(r.cost() for r in own), seconds / 3600)

    @property
    def gain(self) -> float | None:
        return self.baseline - self.best if self.baseline is not None and self.best is not None else None

    def line(self) -> str:
        spent = f"${figure_text(self.dollars, '.2f')} of LLM and {figure_text(self.device_hours, '.2f')} device-hours"
        gain = self.gain
        if gain is None or gain <= 0:
            return f"{spent}; no bpb gained over the baseline, so no cost per bpb"
        return (f"{spent} for {gain:.6f} bpb gained ({self.baseline:.6f} -> {self.best:.6f}): "
                f"${figure_text(self.dollars / gain, ',.0f')} and {figure_text(self.device_hours / gain, ',.1f')} device-hours "
                f"per bpb (${figure_text(self.dollars / gain / 1000, ',.2f')} and "
                f"{figure_text(self.device_hours / gain / 1000, ',.3f')} h per 0.001)")
