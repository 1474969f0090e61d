"""The judge hierarchy: a Reviewer (agent/judges/reviewer.py) where every verdict acts.

    guard (before the run)  -> agent/judges/guard.py: deterministic; a rejection costs no run
    judge (after the run)   -> trusted metric (harness/verify.py, separate process)
                               -> rule judge (agent/judges/judge.py, noise band) + LLM judge with a key
                               -> MetaJudge audit (agent/judges/judge.py)
                               -> escalation to the human queue and a git note (agent/judges/queue_apply.py)
    boundary (between runs) -> audit records, and human decisions applied (agent/judges/queue_apply.py)

Noise (agent/judges/stats.py, docs/judge.md): the baseline runs `baseline_repeats` times
(Decision.again asks for each); sigma is pooled from every trusted run of the tag, read back from
the journal's records (agent/judges/evidence.py: the same after --resume), the judge holding only
the runs of decisions not yet recorded. The keep rule (agent/judges/advance.py) decides on them; the
strict judge's sequential test runs a candidate again (each run a seed of its own) until it is kept
(P(better) >= P_KEEP on at least 2 runs), fades, or MAX_RUNS leave it contested. A run the machine
disturbed is rerun, never counted; where the load varied, runs are paired (pairing.py).
"""
from __future__ import annotations

import os
import statistics
import threading
from pathlib import Path

from agent.judges import advance, evidence, judge, pairing, queue_apply, shrink, stats
from agent.judges.evidence import Band
from agent.tracing import span_of
from agent.judges.guard import diff_lines, guard as run_guard
from agent.judges.judge import Opinion, near_duplicates, rule_opinion, serving_savings
from agent.judges.reviewer import BoundaryContext, GuardVerdict
from harness.secrets import scrub
from runfiles.queue_store import QueueStore
from harness.experiment_record import Basis, Decision, ExperimentRecord   # the decision's own types
from runfiles.run import RunInfo
from runfiles.journal import read_claims
from harness.verify import PinnedError
from harness.runner import STOPPED_EARLY
from harness.verify import VerifyResult

DEFAULT_BASELINE_REPEATS = stats.BASELINE_RUNS
# Runs of the incumbent one decision may ask for (stats.rerun_incumbent), crashed or failed ones
# included: a broken incumbent run is not retried forever.
INCUMBENT_TRIES = 3


class JudgeHierarchy:
    # The loop runs train.py sealed for this reviewer: the trusted evaluation is the only figure.
    evaluates = True

    def __init__(self, *, baseline_repeats: int = DEFAULT_BASELINE_REPEATS, rule: str = "strict",
                 llm_judge=None, tracer=None, budget: float | None = None):
        if rule not in advance.RULES:
            raise ValueError(f"rule {rule!r}: expected one of {', '.join(advance.RULES)}")
        self.rule = rule                  # default | reference | strict (agent/judges/advance.py)
        self.baseline_repeats = max(1, int(baseline_repeats))
        self.llm, self.tracer, self.budget = llm_judge, tracer, budget
        self.band: Band | None = None
        self.llm_stopped: str | None = None   # why the LLM judge is no longer called (the cost cap)
        self._memo = evidence.Unrecorded()   # what the journal does not hold yet
        # With --workers N, judgements come from N threads: the trusted evaluations run side by
        # side, the decisions (noise band, runs per commit, LLM judge, audits) one at a time.
        self._decide = threading.RLock()

    @classmethod
    def build(cls, baseline_repeats: int | None = None, *, rule: str = advance.DEFAULT_RULE, tracer=None,
              budget: float | None = None) -> "JudgeHierarchy":
        """The hierarchy the loop builds: `rule`'s baseline runs unless `baseline_repeats` says;
        an LLM judge only with ANTHROPIC_API_KEY."""
        llm = None
        if os.environ.get("ANTHROPIC_API_KEY"):
            from agent.judges.llm_judge import LLMJudge
            llm = LLMJudge()
        repeats = baseline_repeats if baseline_repeats is not None else advance.BASELINE_RUNS[rule]
        return cls(baseline_repeats=repeats, rule=rule, llm_judge=llm, tracer=tracer, budget=budget)

    # ---- guard -------------------------------------------------------------------------------
    def guard(self, ctx) -> GuardVerdict:
        return run_guard(ctx)

    # ---- judge -------------------------------------------------------------------------------
    def judge(self, ctx, run) -> Decision:
        if run.crash_class == STOPPED_EARLY:   # ended on its printed curve: a discard that cost less
            why = run.stopped_early or "its printed curve was far behind the incumbent's"
            jd = {"status": "discard", "basis": Basis.METRIC.value, "reason": f"stopped early: {why}",
                  "best_before": _best_bpb(ctx), "stopped_early": why}
            queue_apply.note(ctx, "discard", jd["reason"], {"judge": jd})
            return Decision("discard", jd["reason"], None, {"judge": jd}, basis=Basis.METRIC)
        if run.crash_class is not None and self._store_of(ctx).get(ctx.commit) and ctx.commit in self._memo.last_verify:
            with self._decide:
                return self._crashed_repeat(ctx, run)
        if run.crash_class is not None:
            op = rule_opinion(trusted_bpb=None, best_bpb=None, band=self._band(ctx), lines={}, crash=run.crash_class)
            return Decision("crash", op.reason, None, {"judge": {"status": "crash", "basis": Basis.CRASH.value,
                                                                 "rule": op.as_dict()}}, basis=Basis.CRASH)
        v = self._verify(ctx, run)
        with self._decide:
            return self._decide_on(ctx, run, v)

    def judge_incumbent(self, ctx, run) -> Decision:
        """A run of the incumbent (ctx.best's commit), made because a decision on ctx's candidate
        asked for it (Decision.run_next): verified as any run, added to the incumbent's runs
        (a crashed or failed one is not), and the candidate decided again on the new bar."""
        inc = ctx.best["commit"] if ctx.best else None
        if inc is None or ctx.commit not in self._memo.last_verify:
            raise RuntimeError(f"exp {ctx.n}: a run of the incumbent that no decision asked for")
        ictx = _MeasureCtx(inc, ctx.worktree, ctx.run_dir, n=ctx.n)
        note = None
        if run.crash_class is not None:
            note = f"the incumbent's run crashed ({run.crash_class}); not counted"
        else:
            v = self._verify(ictx, run)
            kind, over = self._over_budget(ctx, run)
            if kind or not v.ok:
                note = f"the incumbent's run is no evidence ({over if kind else v.reason}); not counted"
            else:
                with self._decide:
                    self._memo.runs.setdefault(inc, []).append(evidence.sample_of(ictx, run, v.trusted_bpb))
        with self._decide:
            d = self._experiment(ctx, self._memo.last_verify[ctx.commit], self._store_of(ctx)[ctx.commit])
        if note:
            d.reason += f" ({note})"
        return d

    def _crashed_repeat(self, ctx, run) -> Decision:
        """A later run of a commit crashed (say a timeout on a loaded machine). The baseline is
        made from the runs that finished; a candidate that crashes on a confirming run is not kept."""
        samples = self._store_of(ctx)[ctx.commit]
        if ctx.best is None:
            d = self._baseline(ctx, self._memo.last_verify[ctx.commit], samples, final=True)
            d.reason += f" (a repeat run crashed: {run.crash_class}; not counted)"
            return d
        mean = statistics.fmean(evidence.values(samples) or [s.bpb for s in samples])
        reason = (f"a confirming run crashed ({run.crash_class}) after {len(samples)} run(s): a change "
                  "that crashes on another seed is not kept")
        jd = {"status": "discard", "basis": Basis.CRASH.value, "reason": reason,
              "runs": evidence.values(samples), "best_before": _best_bpb(ctx)}
        queue_apply.note(ctx, "discard", reason, {"judge": jd})
        return Decision("discard", reason, mean, {"verify": self._memo.last_verify[ctx.commit].as_dict(), "judge": jd},
                        basis=Basis.CRASH)

    def _decide_on(self, ctx, run, v: VerifyResult) -> Decision:
        kind, over = self._over_budget(ctx, run)
        if kind == "cheat" and ctx.best is None and ctx.commit == _run_info(ctx).base_commit:
            # Only the tag's own base (run.json: the project's train.py, never imported or fixed code)
            # runs no proposed code, so only it is never a cheat; any other baseline is judged as code.
            kind = "over"
        if kind == "cheat" and v.ok:
            v.ok, v.reason = False, over
        if not v.ok:
            return self._integrity(ctx, v)
        sample = evidence.sample_of(ctx, run, v.trusted_bpb)
        sample.over = over or None   # over the limit by what the load explains: no evidence, rerun
        samples = self._store_of(ctx).get(ctx.commit, []) + [sample]
        self._memo.runs.setdefault(ctx.commit, []).append(sample)
        self._memo.last_verify[ctx.commit] = v
        if ctx.best is None:
            return self._baseline(ctx, v, samples)
        return self._experiment(ctx, v, samples)

    def _store_of(self, ctx, samples: list | None = None) -> dict[str, list]:
        """Every trusted run of the tag by commit (evidence.store_of): the journal's, then this
        judge's unrecorded ones; `samples`: this commit's runs as the decision holds them."""
        return evidence.store_of(ctx.history, self._memo, ctx.commit, samples)

    def _store(self, ctx, samples) -> list:
        """This commit's samples as the decision holds them (tests hand in plain values: this
        experiment's runs, which then stand for the commit's unrecorded ones)."""
        if all(isinstance(x, evidence.Sample) for x in samples):
            return list(samples)
        samples = [x if isinstance(x, evidence.Sample) else evidence.Sample(ctx.commit, float(x), n=ctx.n)
                   for x in samples]
        self._memo.runs[ctx.commit] = list(samples)
        return samples

    def _baseline(self, ctx, v: VerifyResult, runs: list, final: bool = False) -> Decision:
        """The baseline's runs so far (advance.baseline); contested when kept short of its repeats."""
        samples = self._store(ctx, runs)
        evidence.screen(samples)
        kept = [r.number for r in ctx.history if r.is_experiment and r.is_baseline and r.status == "keep"
                and r.commit == ctx.commit and r.number != ctx.n]   # an interrupt cut its repeats short
        d, self.band, short = advance.baseline(ctx.commit, v, samples, evidence.noise_of(self._store_of(ctx, samples)),
                                               self.baseline_repeats, final, continues=kept[-1] if kept else None)
        if d.is_again:
            return d
        if short:   # out of reruns short of its counted runs: kept (the tag needs a bar), never silently
            d.verdicts["judge"]["escalations"] = [queue_apply.escalate(ctx, "contested", short, "keep", d.verdicts, "")]
        queue_apply.note(ctx, "keep", d.reason, d.verdicts)
        return d

    def _experiment(self, ctx, v: VerifyResult, runs: list) -> Decision:
        if self.rule == "strict":
            return self._strict(ctx, v, runs)
        d = self._one_run(ctx, v, runs)
        if d is not None:
            return d
        d = self._strict(ctx, v, runs)
        why = self._memo.handed.get(ctx.n)
        if why and len(runs) == 1:   # say why the one run was not enough
            d.reason = f"{why}; {d.reason}"
        return d

    def _strict(self, ctx, v: VerifyResult, runs: list) -> Decision:
        """The strict judge: the sequential test (agent/judges/stats.py), paired where the load varied."""
        samples = self._store(ctx, runs)
        store = self._store_of(ctx, samples)
        inc_commit, inc_bpb = ctx.best["commit"], ctx.best["val_bpb"]
        inc = store.get(inc_commit) or []
        remembered = not evidence.values(inc)
        if remembered:   # no run of the incumbent is known (an old journal): its recorded figure, once
            inc = [evidence.Sample(inc_commit or "?", float(inc_bpb), n=None)] \
                if isinstance(inc_bpb, (int, float)) else []
        if any(s.n == ctx.n for s in inc):   # runs of the incumbent made for this decision: screened too
            evidence.screen(inc)
        evidence.screen(samples)
        latest = samples[-1]
        noise = evidence.noise_of(store)
        cand = evidence.bar_values(ctx.commit, samples, noise, "candidate")
        bar = evidence.bar_values(inc_commit, inc, noise, "incumbent")
        lines = diff_lines(ctx.diff)
        similar = near_duplicates(ctx.diff, ctx.history)
        ev = {"p_keep": stats.P_KEEP, "noise": noise.as_dict(),
              "candidate": {"commit": ctx.commit, "runs": [s.as_dict() for s in samples]},
              "incumbent": {"commit": inc_commit, "runs": [s.as_dict() for s in inc], "remembered": remembered}}
        if ctx.n in self._memo.rule_figures:   # the default rule handed this decision over: its first-run figures
            ev["rule"] = dict(self._memo.rule_figures[ctx.n], decided_by="strict")
        jd = {"best_before": statistics.fmean(bar) if bar else inc_bpb, "spread": noise.sigma,
              "runs": list(cand), "net_lines": lines["net"], "llm": None, "cost_usd": 0.0}
        verdicts = {"verify": v.as_dict(), "judge": jd, "evidence": ev}
        # where the machine's load varied between the runs, they are paired in time (steps mode and
        # runs the harness did not measure carry no load: the unpaired rule, as ever)
        paired = None if remembered else \
            pairing.plan(samples, inc, ctx.n, noise,   # the incumbent's runs asked for and not counted
                         max(0, self._memo.incumbent_tries.get(ctx.n, 0) - sum(s.n == ctx.n for s in inc)))
        if paired is not None:
            ev["paired"] = paired.as_dict()
            if paired.said == "more":
                ask = inc_commit if paired.next_side == "incumbent" else None
                if ask:
                    self._memo.incumbent_tries[ctx.n] = self._memo.incumbent_tries.get(ctx.n, 0) + 1
                ev.update(call="more", measure_incumbent=ask)
                jd.update(status="discard", basis=Basis.METRIC.value, threshold=None)
                mean = statistics.fmean([s.bpb for s in samples])
                return Decision.again("discard", paired.why + ("; the incumbent runs next" if ask else
                                                               "; the candidate runs next"),
                                      mean, verdicts, basis=Basis.METRIC, run_next=ask)
        if (not cand or not bar) and (paired is None or paired.comparison is None or paired.comparison.t is None):
            jd.update(status="discard", basis=Basis.METRIC.value, threshold=None)
            if len(samples) < stats.MAX_RUNS + evidence.DISTURBED_RERUNS and cand == [] and bar:
                ev["call"] = "more"
                return Decision.again("discard", f"run {len(samples)} is no evidence ({latest.disturbed}); "
                                      "running it again", latest.bpb, verdicts, basis=Basis.METRIC)
            tries = self._memo.incumbent_tries.get(ctx.n, 0)
            if not bar and inc_commit and not remembered and tries < INCUMBENT_TRIES:
                # the incumbent has no counted run: measure it, never discard against nothing
                self._memo.incumbent_tries[ctx.n] = tries + 1
                ev.update(call="more", measure_incumbent=inc_commit)
                return Decision.again("discard", f"the incumbent {inc_commit[:7]} has no counted run "
                                      f"({len(inc)} no evidence); it runs again first", latest.bpb, verdicts,
                                      basis=Basis.METRIC, run_next=inc_commit)
            last = next((s.disturbed for s in reversed(samples + inc) if s.disturbed), None)
            reason = (f"contested: out of reruns after {len(samples)} run(s) of the candidate, "
                      + ("none of them evidence" if bar else f"and {len(inc)} of the incumbent, none of those "
                                                             "evidence")
                      + (f" (the last: {last})" if last else "") + ": no evidence either way")
            ev["call"] = "undecided"
            # a decision that runs out of reruns goes to a human, never a silent discard
            jd.update(reason=reason)
            jd["escalations"] = [queue_apply.escalate(ctx, "contested", reason, "discard", verdicts, "")]
            queue_apply.note(ctx, "discard", reason, verdicts)
            return Decision("discard", reason, latest.bpb, verdicts, basis=Basis.METRIC)
        if paired is not None:
            cmp, said, why = paired.comparison, paired.said, paired.why
        else:
            cmp = stats.compare(bar, cand, noise)
            said, why = stats.call(cmp, runs=len(evidence.values(samples)))
        if cmp is None:   # paired, out of reruns before any pair: the unpaired figures, contested
            cmp = stats.compare(bar, cand, noise)
        mean = statistics.fmean(cmp.candidate)
        band = evidence.Margin.of(noise.sigma, cmp.margin, stats.floor_for(bar))
        serving = serving_savings(*judge.serving_costs(ctx.best, ctx.history, v.serving))
        rule = rule_opinion(trusted_bpb=mean, best_bpb=statistics.fmean(cmp.incumbent), band=band, lines=lines,
                            similar_to=similar, serving=serving)
        rule.confidence = cmp.p_better if cmp.p_better is not None else 0.5
        ev.update(comparison=cmp.as_dict(), call=said, why=why)
        jd.update(threshold=cmp.margin, improvement=cmp.gain, rule=rule.as_dict(), p_better=cmp.p_better)
        if paired is None and latest.disturbed and len(samples) < stats.MAX_RUNS + evidence.DISTURBED_RERUNS \
                and said != "keep":
            said, why = "more", f"run {len(samples)} is no evidence ({latest.disturbed}); running it again"
        elif said == "more" and len(samples) >= stats.MAX_RUNS + evidence.DISTURBED_RERUNS:
            said, why = "undecided", f"out of reruns after {len(samples)} runs: {why}"
        tries = self._memo.incumbent_tries.get(ctx.n, 0)
        if said == "more" and paired is None and not latest.disturbed and not remembered and inc_commit and tries < INCUMBENT_TRIES \
                and stats.rerun_incumbent(len(evidence.values(inc)), len(evidence.values(samples))):
            self._memo.incumbent_tries[ctx.n] = tries + 1
            ev.update(call="more", measure_incumbent=inc_commit)
            jd.update(status="discard", basis=Basis.METRIC.value)
            return Decision.again("discard", f"{why}; first the incumbent {inc_commit[:7]} is run again (it has "
                                  f"{len(evidence.values(inc))} run(s), the candidate {len(evidence.values(samples))})",
                                  mean, verdicts, basis=Basis.METRIC, run_next=inc_commit)
        op = evidence.with_call(rule, said, why, cmp.n)
        if op is None:   # more runs: the decision waits for them
            ev["call"] = "more"
            jd.update(status="discard", basis=Basis.METRIC.value)
            return Decision.again("discard", why, mean, verdicts, basis=Basis.METRIC)
        return self._conclude(ctx, op, jd, verdicts, mean)

    def _conclude(self, ctx, op: Opinion, jd: dict, verdicts: dict, mean: float) -> Decision:
        """The rule's opinion, the LLM judge's veto where there is one, the MetaJudge's audit and
        the escalations it calls for, the git note: the decision as recorded."""
        status, basis, reason, escalate = judge.combine(op, self._llm(ctx, op, jd))
        jd.update(status=status, basis=basis.value, reason=reason)
        current = ExperimentRecord.of(n=ctx.n, commit=ctx.commit, status=status, trusted_bpb=mean, diff=ctx.diff,
                                      verdicts={k: v for k, v in verdicts.items() if k != "evidence"},
                                      evidence=verdicts["evidence"])
        with self._span("metajudge", {"n": ctx.n}) as sp:
            audit = judge.audit(ctx.history, current)
            if self.rule == "default":   # the one-run advances, watched (agent/judges/advance.py)
                audit.flags += advance.audit_flags(ctx.history, current, read_claims(Path(ctx.run_dir) / "journal.jsonl"))
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
            if not judge.recently_flagged(ctx.history, flag["kind"]):
                items.append(("bias", f"{flag['kind']}: {flag['reason']}"))
                meta["escalated"].append(flag)
        jd["escalations"] = [queue_apply.escalate(ctx, kind, why, status, verdicts, audit.reason) for kind, why in items]
        self._memo.audits.append(scrub({"kind": "audit", "tag": ctx.tag, **meta}))
        queue_apply.note(ctx, status, reason, verdicts)
        return Decision(status, reason, mean, verdicts, basis=basis)

    def _one_run(self, ctx, v: VerifyResult, runs: list) -> Decision | None:
        """The default or the reference rule on a candidate's first run (agent/judges/advance.py);
        None where the strict judge decides instead (a later run, a run no evidence, a load not
        comparable with the incumbent's, a gain too good for one run, an equal result cheaper)."""
        samples = self._store(ctx, runs)
        if len(samples) != 1:
            return None
        store = self._store_of(ctx, samples)
        inc_commit = ctx.best["commit"]
        inc = list(store.get(inc_commit) or [])
        evidence.screen(samples)
        s, lines = samples[0], diff_lines(ctx.diff)
        noise = evidence.noise_of(store)
        sigma = noise.sigma or stats.floor_for([s.bpb])
        ev = {"noise": noise.as_dict(), "candidate": {"commit": ctx.commit, "runs": [s.as_dict()]},
              "incumbent": {"commit": inc_commit, "runs": [x.as_dict() for x in inc], "remembered": False}}
        if self.rule == "reference":   # the reference protocol: its figures as they are,
            if s.over:                  # never a run the harness's clock says trained past its limit
                return None
            call = advance.reference(s.bpb, ctx.best["val_bpb"])
        else:
            bar = evidence.values(inc)
            if s.disturbed or not bar or any(pairing.comparable(s.speed.load, x.speed.load, pairing.LOAD_SAME,
                                                                s.speed.other, x.speed.other) for x in inc if x.used):
                return None      # no evidence, no measured bar, or another machine in effect: the strict judge
            prior = shrink.fit_prior(advance.effects_of(ctx.history), sigma)
            est = advance.estimate_of(inc_commit, bar, sigma, ctx.history, prior)
            serving = serving_savings(*judge.serving_costs(ctx.best, ctx.history, v.serving))
            call = advance.advance(s.bpb, est, sigma, advance.effects_of(ctx.history), net_lines=lines["net"],
                                   equal_result_ok=bool(judge.clearly_cheaper(serving))
                                   or lines["net"] <= -judge.DELETION_LINES, big_diff_lines=judge.BIG_DIFF_LINES,
                                   df=noise.df if noise.sigma else None)
            self._memo.rule_figures[ctx.n] = call.figures     # written with the strict judge's record too
            self._memo.handed[ctx.n] = call.why
            if call.said == "strict":
                return None
        ev.update(rule=dict(call.figures, decided_by=call.figures["rule"]), call=call.said, why=call.why)
        bar_value = call.figures["bar"]
        gain = bar_value - s.bpb if bar_value is not None else None
        jd = {"best_before": bar_value, "spread": sigma, "runs": [s.bpb], "net_lines": lines["net"], "llm": None,
              "cost_usd": 0.0, "threshold": 0.0, "improvement": gain, "p_better": call.p_better}
        verdicts = {"verify": v.as_dict(), "judge": jd, "evidence": ev}
        basis = Basis.SIMPLICITY if call.why.startswith("simplicity") else Basis.METRIC
        op = Opinion("rule", call.said, call.why, call.p_better if call.p_better is not None else 0.5,
                     {"rule": call.figures}, basis)
        jd["rule"] = op.as_dict()
        return self._conclude(ctx, op, jd, verdicts, s.bpb)

    def _integrity(self, ctx, v: VerifyResult) -> Decision:
        reason = f"integrity: {v.reason}"
        jd = {"status": "discard", "basis": Basis.INTEGRITY.value, "reason": reason, "best_before": _best_bpb(ctx)}
        verdicts = {"verify": v.as_dict(), "judge": jd}
        jd["escalations"] = [queue_apply.escalate(ctx, "integrity", reason, "discard", verdicts, "")]
        queue_apply.note(ctx, "discard", reason, verdicts)
        return Decision("discard", reason, None, verdicts, basis=Basis.INTEGRITY)

    # ---- pieces ------------------------------------------------------------------------------
    def _band(self, ctx) -> Band:
        if self.band is None:   # after --resume: the baseline record's runs
            store = self._store_of(ctx)
            base = next((r for r in ctx.history if r.is_experiment and r.noise_band() and r.noise_band().values), None)
            vals = (evidence.values(store.get(base.commit, [])) or base.noise_band().values) if base else []
            noise = evidence.noise_of(store) if store else stats.pooled_noise({"baseline": vals})
            self.band = Band.of(vals, noise)
        return self.band

    def _verify(self, ctx, run) -> VerifyResult:
        """The trusted evaluation the executor made where the model was (harness/job.py evaluate,
        the one place it is made). A run without one cannot be decided on: that is a failure."""
        with self._span("verify", {"n": ctx.n, "artifact": str(run.artifact)}) as sp:
            v = run.verified
            if v is None:
                v = VerifyResult(False, "no trusted evaluation came with this run (its job carried no "
                                 "EvalSpec): nothing to decide on")
            elif v.pinned_error:   # the pinned inputs no longer match and cannot be restored: stop
                raise PinnedError(v.pinned_error)
            sp.log(output={"ok": v.ok, "reason": v.reason, "trusted_bpb": v.trusted_bpb, "seconds": v.seconds})
        return v

    def _over_budget(self, ctx, run) -> tuple[str | None, str]:
        """(None | "over" | "cheat", why) by the harness's clock (evidence.over_budget)."""
        return evidence.over_budget(run, self.budget or _run_info(ctx).budget)

    def out_of_reruns(self, ctx, decision: Decision, runs: int) -> Decision:
        return queue_apply.out_of_reruns(ctx, decision, runs)

    def stop_llm(self, why: str) -> None:
        """The cost cap (agent/budget.py): no more LLM-judge calls; the rule judge decides alone."""
        self.llm_stopped = why

    def _llm(self, ctx, rule: Opinion, jd: dict) -> Opinion | None:
        """The LLM judge's opinion (None without one); its result goes into `jd` for the journal."""
        if self.llm is not None and self.llm_stopped:
            jd["llm"] = {"skipped": self.llm_stopped}
            return None
        if self.llm is None:
            return None
        figures = Decision("discard", "", verdicts={"judge": jd}).judge_figures()
        with self._span("llm_judge", {"n": ctx.n, "rule": rule.status}) as sp:
            res = self.llm.review(diff=ctx.diff, hypothesis=ctx.proposal.hypothesis,
                                  description=ctx.proposal.description, figures=figures, rule=rule,
                                  history=ctx.history)
            sp.log(output={"status": res.opinion.status if res.opinion else None, "error": res.error},
                   tokens=res.tokens, cost=res.cost_usd)
        jd["llm"], jd["cost_usd"] = res.as_dict(), res.cost_usd
        return res.opinion

    def _span(self, name: str, input: dict):
        return span_of(self.tracer, name, input)

    # ---- boundary ----------------------------------------------------------------------------
    def boundary(self, ctx: BoundaryContext) -> list[dict]:
        """The audit records of the decisions since the last boundary, then the human queue's
        decisions applied to the branch (agent/judges/queue_apply.py), each re-measurement a run of
        ctx.train verified here; ctx.on_moved moves the tag's state after each."""
        records, self._memo.audits = self._memo.audits, []
        files = ctx.files
        queue_path = Path(files.run_dir) / "queue.sqlite"
        if not queue_path.exists():
            return records

        def measure(commit: str) -> dict:
            return self.measure(commit, worktree=files.worktree, run_dir=files.run_dir, train=ctx.train)

        records += queue_apply.apply_decided(QueueStore(queue_path), repo=files.repo, worktree=files.worktree, tag=files.tag,
                                 measure=measure, history=ctx.history,
                                 on_outcome=lambda outcome: ctx.on_moved(outcome.head, outcome.best))
        return [scrub(r) for r in records]

    def measure(self, commit: str, *, worktree: Path, run_dir: Path, train) -> dict:
        """Train and verify `commit` (checked out in `worktree`) outside the experiment sequence:
        `train(commit)` runs it (the caller's executor, agent/between.py), the trusted evaluation
        is checked here as for an experiment; `run_dir` holds run.json and the evaluator's folder."""
        run = train(commit)
        log = str(run.log_path)
        if run.crash_class is not None:
            return {"ok": False, "reason": f"crashed: {run.crash_class}", "log": log}
        ctx = _MeasureCtx(commit, worktree, run_dir)
        kind, over = self._over_budget(ctx, run)   # the same clock as an experiment's runs
        if kind is not None:
            return {"ok": False, "reason": f"{'integrity' if kind == 'cheat' else 'no evidence'}: {over}",
                    "log": log, "clock": kind}
        v = self._verify(ctx, run)
        return {"ok": v.ok, "reason": v.reason, "trusted_bpb": v.trusted_bpb, "printed_bpb": v.printed_bpb,
                "verify_seconds": v.seconds, "memory_gb": (run.printed("peak_vram_mb") or 0.0) / 1024,
                "log": log}


class _MeasureCtx:
    """Just what _verify and evidence.sample_of read, for a run outside an experiment's own."""

    def __init__(self, commit, worktree, run_dir, n=None):
        self.n, self.commit = n, commit
        self.worktree, self.run_dir, self.parent = Path(worktree), Path(run_dir), commit


def _run_info(ctx) -> RunInfo:
    """The tag's run.json (an empty one when it is missing or unreadable)."""
    return RunInfo.read(Path(ctx.run_dir) / "run.json") or RunInfo()


def _best_bpb(ctx) -> float | None:
    return ctx.best["val_bpb"] if ctx.best else None

