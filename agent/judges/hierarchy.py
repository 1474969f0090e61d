"""The judge hierarchy: a Reviewer (agent/judges/reviewer.py) where every verdict acts.

    guard (before the run)  -> agent/judges/guard.py: deterministic; a rejection costs no run
    judge (after the run)   -> trusted metric (harness/verify.py, separate process)
                               -> rule judge (agent/judges/judge.py, noise band) + LLM judge with a key
                               -> MetaJudge audit (agent/judges/metajudge.py)
                               -> escalation to the human queue (harness/queue_store.py)
    boundary (between runs) -> audit records, and human decisions applied (agent/judges/queue_apply.py)

Noise: the baseline's first judgement asks the loop for reruns (Decision.rerun) until
`baseline_repeats` trusted values exist; their spread is the band. A later gain inside the band
asks for one confirming rerun; the mean of the runs decides, and if it is still inside the band
the experiment is discarded as "contested" and escalated. The loop never waits for a human.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import threading
from pathlib import Path

from agent.judges import metajudge
from agent.judges.guard import diff_lines, guard as run_guard
from agent.judges.judge import K_SPREAD, NoiseBand, Opinion, near_duplicates, rule_opinion, serving_savings
from agent.judges.queue_apply import apply_decided
from agent.judges.reviewer import GuardVerdict
from harness.secrets import scrub
from harness import gitops
from harness.queue_store import QueueStore
from harness.records import Basis, Decision, experiment_records
from harness import pinned
from harness.clock import limit_for
from harness.pinned import PinnedError, Seal
from harness.verify import VerifyResult, eval_rows, verify

# The trusted evaluator's folders (removed after each evaluation; --resume removes leftovers).
VERIFY_DIR = ".verify"

DEFAULT_BASELINE_REPEATS = 2
# Confirming reruns asked for a gain inside the band (the loop allows up to 2 reruns per commit).
CONFIRM_RERUNS = 1
# An LLM "discard"/"contested" at this confidence or more turns a rule keep into a contested discard.
LLM_VETO_CONFIDENCE = 0.7
# Without the harness clock (a run that printed no step lines), its wall clock may be this factor
# of the budget plus this grace before it counts as trained past the budget (time-budget mode only).
WALL_FACTOR = 1.5
WALL_GRACE_S = 90.0
# The judge's own notes ref: the loop's `add -f` on refs/notes/autoresearch would replace ours.
JUDGE_NOTES_REF = "refs/notes/autoresearch-judge"
# Characters of a diff stored in a queue item's payload.
PAYLOAD_DIFF_CHARS = 50_000


class JudgeHierarchy:
    # The loop runs train.py sealed for this reviewer: the trusted evaluation is the only figure.
    evaluates = True

    def __init__(self, *, baseline_repeats: int = DEFAULT_BASELINE_REPEATS, k: float = K_SPREAD,
                 llm_judge=None, tracer=None, budget: float | None = None, verify_timeout: float | None = None):
        self.baseline_repeats = max(1, int(baseline_repeats))
        self.k, self.llm, self.tracer, self.budget = k, llm_judge, tracer, budget
        self.verify_timeout = verify_timeout
        self.band: NoiseBand | None = None
        self._runs: dict[str, list[float]] = {}
        self._last_verify: dict[str, VerifyResult] = {}   # the last successful verification per commit
        self._audits: list[dict] = []
        self._prepare: str | None = None
        self.seal: Seal | None = None     # the loop's sandbox and pinned inputs (harness/pinned.py)
        # With --workers N, judgements come from N threads: the trusted evaluations run side by
        # side, the decisions (noise band, runs per commit, LLM judge, audits) one at a time.
        self._decide = threading.RLock()

    @classmethod
    def for_loop(cls, args, loop) -> "JudgeHierarchy":
        """The hierarchy the loop builds: LLM judge only with ANTHROPIC_API_KEY."""
        llm = None
        if os.environ.get("ANTHROPIC_API_KEY"):
            from agent.judges.llm_judge import LLMJudge
            llm = LLMJudge()
        return cls(baseline_repeats=getattr(args, "baseline_repeats", DEFAULT_BASELINE_REPEATS),
                   llm_judge=llm, tracer=getattr(loop, "tracer", None), budget=getattr(loop, "budget", None))

    # ---- guard -------------------------------------------------------------------------------
    def guard(self, ctx) -> GuardVerdict:
        return run_guard(ctx)

    # ---- judge -------------------------------------------------------------------------------
    def judge(self, ctx, run) -> Decision:
        if run.crash_class is not None and self._runs.get(ctx.commit) and ctx.best is None \
                and ctx.commit in self._last_verify:
            # A baseline repeat crashed (say a timeout on a loaded machine): the runs that
            # finished still make the baseline; the band comes from them (or the floor).
            d = self._baseline(ctx, self._last_verify[ctx.commit], self._runs[ctx.commit], final=True)
            d.reason += f" (a repeat run crashed: {run.crash_class}; not counted)"
            return d
        if run.crash_class is not None:
            op = rule_opinion(trusted_bpb=None, best_bpb=None, band=self._band(ctx), lines={}, crash=run.crash_class)
            return Decision("crash", op.reason, None, {"judge": {"status": "crash", "basis": Basis.CRASH.value,
                                                                 "rule": op.as_dict()}}, basis=Basis.CRASH)
        printed = (run.summary or {}).get("val_bpb")
        v = self._verify(ctx, run, printed)
        with self._decide:
            return self._decide_on(ctx, run, v)

    def _decide_on(self, ctx, run, v: VerifyResult) -> Decision:
        over = self._over_budget(ctx, run)
        if over and v.ok:
            v.ok, v.reason = False, over
        if not v.ok:
            return self._integrity(ctx, v)
        runs = self._runs.setdefault(ctx.commit, [])
        runs.append(v.trusted_bpb)
        self._last_verify[ctx.commit] = v
        if ctx.best is None:
            return self._baseline(ctx, v, runs)
        return self._experiment(ctx, v, runs)

    def _baseline(self, ctx, v: VerifyResult, runs: list[float], final: bool = False) -> Decision:
        mean = statistics.fmean(runs)
        jd = {"status": "keep", "basis": Basis.BASELINE.value, "runs": list(runs), "baseline_values": list(runs)}
        verdicts = {"verify": v.as_dict(), "judge": jd}
        # The band from the runs so far, every time: if the loop stops rerunning early (it caps
        # reruns), the baseline's record still carries a usable band.
        self.band = NoiseBand(list(runs), self.k)
        jd.update(band=self.band.as_dict(), threshold=self.band.threshold, spread=self.band.spread)
        if len(runs) < self.baseline_repeats and not final:
            return Decision("keep", f"baseline run {len(runs)}/{self.baseline_repeats}: {v.trusted_bpb:.6f}; "
                            "rerunning to measure the noise", mean, verdicts, rerun=True, basis=Basis.BASELINE)
        reason = (f"baseline: trusted val_bpb {mean:.6f} over {len(runs)} run(s); noise band "
                  f"{self.band.threshold:.6f} ({self.k:g}x spread {self.band.spread:.6f}"
                  f"{'' if self.band.measured else ', floor: one run only'})")
        jd["reason"] = reason
        self._note(ctx, "keep", reason, verdicts)
        return Decision("keep", reason, mean, verdicts, basis=Basis.BASELINE)

    def _experiment(self, ctx, v: VerifyResult, runs: list[float]) -> Decision:
        band = self._band(ctx)
        mean = statistics.fmean(runs)
        # The mean of m runs is sqrt(m) times less noisy: the band narrows accordingly.
        eff = NoiseBand(band.values, band.k / math.sqrt(len(runs)))
        lines = diff_lines(ctx.diff)
        similar = near_duplicates(ctx.diff, ctx.history)
        best = ctx.best.get("val_bpb")
        serving = serving_savings(*self._serving_costs(ctx, v))
        rule = rule_opinion(trusted_bpb=mean, best_bpb=best, band=eff, lines=lines, similar_to=similar,
                            serving=serving)
        jd = {"best_before": best, "threshold": eff.threshold, "spread": band.spread, "runs": list(runs),
              "improvement": (best - mean) if best is not None else None, "net_lines": lines["net"],
              "rule": rule.as_dict(), "llm": None, "cost_usd": 0.0}
        verdicts = {"verify": v.as_dict(), "judge": jd}
        if rule.status == "contested" and len(runs) <= CONFIRM_RERUNS:
            jd.update(status="discard", basis=Basis.METRIC.value)
            return Decision("discard", f"contested: {rule.reason}; asking a confirming rerun", mean, verdicts,
                            rerun=True, basis=Basis.METRIC)
        llm = self._llm(ctx, rule, jd)
        status, basis, reason, escalate = self._combine(rule, llm)
        jd.update(status=status, basis=basis.value, reason=reason)
        current = {"n": ctx.n, "status": status, "trusted_bpb": mean, "diff": ctx.diff, "verdicts": verdicts}
        with self._span("metajudge", {"n": ctx.n}) as sp:
            audit = metajudge.audit(ctx.history, current)
            sp.log(output=audit.as_dict())
        meta = audit.as_dict()
        meta["escalated"] = []
        verdicts["metajudge"] = meta
        items = []
        if escalate:
            items.append((escalate, reason))
        if audit.contradiction:
            items.append(("contradiction", audit.contradiction))
        for flag in audit.flags:
            if not metajudge.recently_flagged(ctx.history, flag["kind"]):
                items.append(("bias", f"{flag['kind']}: {flag['reason']}"))
                meta["escalated"].append(flag)
        jd["escalations"] = [self._escalate(ctx, kind, why, status, verdicts, audit.reason) for kind, why in items]
        self._audits.append(scrub({"kind": "audit", "tag": ctx.tag, **meta}))
        self._note(ctx, status, reason, verdicts)
        return Decision(status, reason, mean, verdicts, basis=basis)

    def _combine(self, rule: Opinion, llm: dict | None):
        """(status, basis, reason, escalation kind or None). The metric decides; the LLM can veto."""
        basis = rule.basis
        if rule.status == "contested":
            return "discard", basis, f"contested: {rule.reason}", "contested"
        st, conf = (llm or {}).get("status"), (llm or {}).get("confidence") or 0.0
        if rule.status == "keep" and st in ("discard", "contested") and conf >= LLM_VETO_CONFIDENCE:
            return ("discard", Basis.LLM_VETO, f"contested: the rule judge would keep ({rule.reason}) but the LLM "
                    f"judge says {st} at {conf:.2f}: {llm.get('reason')}", "disagreement")
        if rule.status == "discard" and st == "keep" and conf >= LLM_VETO_CONFIDENCE:
            return "discard", basis, f"{rule.reason} (the LLM judge would keep: {llm.get('reason')})", "disagreement"
        suffix = f" (LLM judge agrees: {llm.get('reason')})" if st == rule.status else ""
        return rule.status, basis, rule.reason + suffix, None

    def _integrity(self, ctx, v: VerifyResult) -> Decision:
        reason = f"integrity: {v.reason}"
        jd = {"status": "discard", "basis": Basis.INTEGRITY.value, "reason": reason,
              "best_before": (ctx.best or {}).get("val_bpb")}
        verdicts = {"verify": v.as_dict(), "judge": jd}
        jd["escalations"] = [self._escalate(ctx, "integrity", reason, "discard", verdicts, "")]
        self._note(ctx, "discard", reason, verdicts)
        return Decision("discard", reason, None, verdicts, basis=Basis.INTEGRITY)

    # ---- pieces ------------------------------------------------------------------------------
    def _serving_costs(self, ctx, v: VerifyResult) -> tuple[dict | None, dict | None]:
        """Serving figures of this experiment's model and of the best's, both as the trusted
        evaluator measured them from the recorded graphs (never from a config train.py wrote)."""
        best = (ctx.best or {}).get("commit")
        best_rec = next((r for r in reversed(experiment_records(ctx.history))
                         if r.status == "keep" and r.commit == best), None)
        if best_rec is None:
            return None, None
        theirs = ((best_rec.verify or {}).get("details") or {}).get("serving")
        return (v.details or {}).get("serving"), theirs

    def _band(self, ctx) -> NoiseBand:
        if self.band is None:
            for rec in experiment_records(ctx.history):   # after --resume: the baseline record has it
                figures = rec.noise_band()
                if figures and figures.values:
                    self.band = NoiseBand(figures.values, self.k)
                    break
        return self.band or NoiseBand([], self.k)

    def _verify(self, ctx, run, printed) -> VerifyResult:
        sealed = bool((getattr(run, "extra", None) or {}).get("sealed"))
        seal = self.seal
        with self._span("verify", {"n": ctx.n, "artifact": str(run.artifact)}) as sp:
            done = (getattr(run, "extra", None) or {}).get("verify_result")
            bad = None if done is not None else self._inputs_changed()
            if done is not None:   # the executor evaluated where the model was (harness/executors/node.py)
                pinned_error = (done.details or {}).get("pinned_error")
                if pinned_error:   # the pinned inputs no longer match and cannot be restored: stop
                    raise PinnedError(pinned_error)
                v = done
            elif bad:
                v = VerifyResult(False, bad, printed_bpb=None if sealed else printed)
            else:
                profile = _run_json(ctx).get("profile") or os.environ.get("AUTORESEARCH_PROFILE", "")
                kw = {"timeout_s": self.verify_timeout} if self.verify_timeout else {}
                if seal is not None:
                    kw.update(sandbox=seal.sandbox, eval_cache=seal.eval_cache)
                v = verify(run.artifact, train_source=ctx.new_source, prepare_source=self._trusted_prepare(ctx),
                           printed_bpb=None if sealed else printed, sealed=sealed, rows=eval_rows(profile),
                           work_root=Path(ctx.run_dir) / VERIFY_DIR, **kw)
            sp.log(output={"ok": v.ok, "reason": v.reason, "trusted_bpb": v.trusted_bpb, "seconds": v.seconds})
        return v

    def _inputs_changed(self) -> str | None:
        """Hash the pinned evaluation inputs; on a mismatch repair them and fail this experiment."""
        seal = self.seal
        if seal is None or seal.eval_cache is None or not seal.inputs:
            return None
        bad = pinned.check(seal.eval_cache, seal.inputs)
        if not bad:
            return None
        note = pinned.repair(seal.eval_cache, seal.data, seal.inputs)   # PinnedError stops the loop
        return f"the evaluation inputs changed ({'; '.join(bad[:4])}); {note}"

    def _trusted_prepare(self, ctx) -> str:
        """prepare.py as committed at the tag's base: what no experiment could have touched."""
        if self._prepare is None:
            for rev in (_run_json(ctx).get("base_commit"), ctx.parent):
                if rev:
                    with contextlib.suppress(gitops.GitError):
                        self._prepare = gitops.show_file(Path(ctx.worktree), rev, "prepare.py")
                        break
            else:
                self._prepare = (Path(ctx.worktree) / "prepare.py").read_text()
        return self._prepare

    def _over_budget(self, ctx, run) -> str | None:
        """By the harness's clock (harness/clock.py), not train.py's own figure."""
        extra = getattr(run, "extra", None) or {}
        if extra.get("steps_mode") or os.environ.get("AUTORESEARCH_STEPS"):
            return None
        budget = self.budget or _run_json(ctx).get("budget")
        if not budget:
            return None
        clock = extra.get("clock") or {}
        if clock.get("startup_s") is None:
            if extra.get("sealed"):
                return ("the run printed no step lines (`step N | ...`): the harness cannot time its "
                        "training, so it cannot be kept")
            if run.wall_seconds <= WALL_FACTOR * budget + WALL_GRACE_S:
                return None
            return (f"the run took {run.wall_seconds:.0f}s of wall clock for a {budget:g}s budget "
                    f"(limit {WALL_FACTOR:g}x + {WALL_GRACE_S:.0f}s): it trained past the budget")
        limit = limit_for(budget)
        if clock["charged_s"] <= limit:
            return None
        return (f"by the harness's clock the run trained {clock['charged_s']:.1f}s for a {budget:g}s budget "
                f"(limit {limit:.1f}s; step lines {clock['train_s']:.1f}s, startup {clock['startup_s']:.1f}s "
                f"against the baseline's {clock['allowance_s']:.1f}s, after the last step "
                f"{clock.get('post_s') or 0:.1f}s against {clock.get('post_allowance_s') or 0:.1f}s): "
                "it trained past the budget")

    def _llm(self, ctx, rule: Opinion, jd: dict) -> dict | None:
        if self.llm is None:
            return None
        figures = {k: jd.get(k) for k in ("best_before", "threshold", "spread", "runs", "improvement", "net_lines")}
        with self._span("llm_judge", {"n": ctx.n, "rule": rule.status}) as sp:
            res = self.llm.review(diff=ctx.diff, hypothesis=ctx.proposal.hypothesis,
                                  description=ctx.proposal.description, figures=figures, rule=rule,
                                  history=ctx.history)
            sp.log(output={"status": res.opinion.status if res.opinion else None, "error": res.error},
                   tokens=res.tokens, cost=res.cost_usd)
        jd["llm"], jd["cost_usd"] = res.as_dict(), res.cost_usd
        return jd["llm"] if res.opinion else None

    def _escalate(self, ctx, kind: str, reason: str, status: str, verdicts: dict, meta_reason: str) -> dict:
        jd = verdicts.get("judge") or {}
        payload = scrub({
            "status": status, "description": ctx.proposal.description, "hypothesis": ctx.proposal.hypothesis,
            "parent": ctx.parent, "diff": (ctx.diff or "")[:PAYLOAD_DIFF_CHARS],
            "figures": {k: jd.get(k) for k in ("best_before", "threshold", "spread", "runs", "improvement",
                                               "net_lines")} | {"trusted_bpb": (verdicts.get("verify") or {}).get("trusted_bpb"),
                                                                "printed_bpb": (verdicts.get("verify") or {}).get("printed_bpb")},
            "rule": jd.get("rule"), "llm": jd.get("llm"), "metajudge": meta_reason,
            "verify": verdicts.get("verify"),
            "discarded_ref": gitops.discarded_ref(ctx.tag, ctx.n) if status != "keep" else None})
        try:
            item = QueueStore(Path(ctx.run_dir) / "queue.sqlite").escalate(
                tag=ctx.tag, experiment=ctx.n, commit=ctx.commit, kind=kind, reason=scrub(reason), payload=payload)
        except Exception as e:  # the queue must never stop the loop; the journal keeps the reason
            return {"kind": kind, "error": f"{type(e).__name__}: {e}"}
        return {"kind": kind, "id": item}

    def _note(self, ctx, status: str, reason: str, verdicts: dict) -> None:
        """The decision and both opinions as a git note on the experiment commit (own notes ref)."""
        if not ctx.commit:
            return
        jd = verdicts.get("judge") or {}
        note = scrub({"n": ctx.n, "status": status, "reason": reason, "trusted_bpb": (verdicts.get("verify") or {}).get("trusted_bpb"),
                      "rule": jd.get("rule"), "llm": jd.get("llm"),
                      "metajudge": (verdicts.get("metajudge") or {}).get("flags"),
                      "verify": (verdicts.get("verify") or {}).get("reason"),
                      "verify_seconds": (verdicts.get("verify") or {}).get("seconds")})
        with contextlib.suppress(gitops.GitError, OSError):
            gitops.git(Path(ctx.worktree), *gitops._identity_args(Path(ctx.worktree)), "notes", "--ref",
                       JUDGE_NOTES_REF, "add", "-f", "-m", json.dumps(note, default=str, indent=1), ctx.commit)

    @contextlib.contextmanager
    def _span(self, name: str, input: dict):
        if self.tracer is None:
            yield _NoSpan()
            return
        with self.tracer.span(name, input=input) as sp:
            yield sp

    # ---- boundary ----------------------------------------------------------------------------
    def boundary(self, loop) -> list[dict]:
        records, self._audits = self._audits, []
        queue_path = Path(loop.run_dir) / "queue.sqlite"
        if not queue_path.exists():
            return records

        def measure(commit: str) -> dict:
            return self.measure(loop, commit)

        def moved(outcome) -> None:
            loop.last_kept = outcome.head
            if outcome.best is not None:
                loop.best = outcome.best

        records += apply_decided(QueueStore(queue_path), repo=loop.repo, worktree=loop.worktree, tag=loop.tag,
                                 measure=measure, history=loop.history, on_outcome=moved)
        return [scrub(r) for r in records]

    def measure(self, loop, commit: str) -> dict:
        """Train and verify `commit` (checked out in the worktree) outside the experiment sequence."""
        with contextlib.suppress(Exception):
            loop.set_phase("training")
        from agent.experiment import run_sealed
        n = loop.next_n()
        run = run_sealed(loop, n, commit, f"queue-{commit[:7]}.log", None)
        log = str(run.log_path)
        if run.crash_class is not None:
            return {"ok": False, "reason": f"crashed: {run.crash_class}", "log": log}
        source = gitops.show_file(Path(loop.worktree), commit, "train.py")
        ctx = _MeasureCtx(loop, commit, source)
        v = self._verify(ctx, run, (run.summary or {}).get("val_bpb"))
        return {"ok": v.ok, "reason": v.reason, "trusted_bpb": v.trusted_bpb, "printed_bpb": v.printed_bpb,
                "verify_seconds": v.seconds, "memory_gb": float((run.summary or {}).get("peak_vram_mb") or 0) / 1024,
                "log": log}


class _NoSpan:
    def log(self, *a, **k):
        pass


class _MeasureCtx:
    """Just what _verify and _trusted_prepare read, for a re-measurement outside an experiment."""

    def __init__(self, loop, commit, source):
        self.n, self.commit, self.new_source = None, commit, source
        self.worktree, self.run_dir, self.parent = Path(loop.worktree), Path(loop.run_dir), commit


def _run_json(ctx) -> dict:
    try:
        return json.loads((Path(ctx.run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return {}
