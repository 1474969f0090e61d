"""`--screen K`: the proposer makes K candidate edits, a short successive-halving screen picks one.

Only the winner gets the loop's full wall-clock run (and the judges). The screen trains each
candidate for a few hundred steps at most through harness/search/halving.py (step budgets, checkpoint
promotion, a short cool-down branch before each rung's evaluation), so it costs a fraction of one
full run. Every screened candidate is journaled (kind "screen", with its experiment number), so
the losers are never lost: their sources sit under the run folder's screen/NNNN/candidates/.
Sealed, each rung is scored by the trusted evaluator on a proxy split held out from every
candidate (harness/proxy.py), never by a figure a candidate printed.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

from agent.pending import InFlight
from agent.proposers.base import Proposal
from agent.proposing import call_proposer
from harness.proxy import make_proxy
from harness.results import append_journal
from harness.verify import PROXY_EVAL_TOKENS_MAX, eval_rows

# Steps of the screen's first rung (later rungs multiply it by the screen's eta).
SCREEN_MIN_STEPS = 20


def proxy_tokens(profile: str | None) -> int | None:
    """Tokens of a proxy evaluation: the profile's EVAL_TOKENS, capped (a screen ranks, it does not measure)."""
    return PROXY_EVAL_TOKENS_MAX if profile == "gpu" else None


def gather(loop, n: int, source: str, first: tuple[Proposal, dict], k: int) -> list[tuple[Proposal, dict]]:
    """K distinct proposals for experiment n: `first`, then K-1 more, each request seeing the
    candidates already gathered (as pending history) so a proposer does not repeat itself."""
    got = [first]
    seen = {first[0].source}
    tries = 0
    while len(got) < k and tries < 2 * k:
        tries += 1
        pending = [InFlight.of(n, loop.last_kept, replace(p, description=f"(screen candidate) {p.description}"))
                   for p, _ in got]
        proposal, info = call_proposer(loop, loop.request(n, source, pending=pending))
        if proposal.source in seen or proposal.source == source:
            continue
        seen.add(proposal.source)
        got.append((proposal, info))
    return got


def guarded(loop, n: int, source: str, candidates: list[tuple[Proposal, dict]]) -> list[tuple[Proposal, dict]]:
    """The candidates the guard passes; each rejection is journaled (kind "screen"), none trains."""
    from agent.experiment import _unified
    from agent.judges.reviewer import ExperimentContext
    kept = []
    for i, (p, info) in enumerate(candidates):
        diff = _unified(source, p.source)
        ctx = ExperimentContext(n=n, tag=loop.tag, worktree=loop.worktree, parent=loop.last_kept, commit=None,
                                old_source=source, new_source=p.source, diff=diff, proposal=p,
                                history=list(loop.history), best=loop.best, run_dir=loop.run_dir)
        verdict = loop.reviewer.guard(ctx)
        if verdict.ok:
            kept.append((p, info))
            continue
        loop.console.event(f"screen: guard rejected candidate {i} ({p.description}): {verdict.reason}")
        append_journal(loop.journal_path, {"kind": "screen", "n": n, "tag": loop.tag, "candidate": i,
                                           "label": p.description, "rejected": verdict.reason, "rungs": []})
    return kept


def pick(loop, n: int, source: str, first: tuple[Proposal, dict]) -> tuple[Proposal, dict]:
    """Screen K candidates and return the winner (with the screen's summary in its info)."""
    from harness.search.halving import screen   # imported lazily: only --screen runs need the pool

    k = int(loop.config.screen)
    loop.set_phase("proposing", n)
    candidates = guarded(loop, n, source, gather(loop, n, source, first, k))
    if not candidates:
        return first                 # all rejected: the first goes to the guard (and is recorded) as usual
    if len(candidates) < 2:
        return candidates[0]
    loop.set_phase("screening", n)
    t0 = time.monotonic()
    labels = [p.description for p, _ in candidates]
    with loop.tracer.span("screen", input={"n": n, "k": len(candidates), "labels": labels}) as sp:
        try:
            seal = loop.seal
            sealed = seal is not None and seal.sealed and seal.data is not None
            proxy = make_proxy(seal.data, loop.run_dir / ".sealed" / "proxy") if sealed else None
            profile = loop.run_info.get("profile") or os.environ.get("AUTORESEARCH_PROFILE")
            res = screen([p.source for p, _ in candidates], workdir=loop.run_dir / "screen" / f"{n:04d}",
                         prepare_dir=loop.worktree, labels=labels, min_steps=SCREEN_MIN_STEPS,
                         seed=loop.config.seed, log=loop.console.event,
                         sandbox=seal.sandbox if sealed else None, data=seal.data if sealed else None,
                         proxy=proxy, rows=eval_rows(profile), eval_tokens=proxy_tokens(profile))
        except Exception as exc:   # a broken screen must not stop the loop: run the first candidate
            loop.console.event(f"screen failed ({exc}); running the first candidate unscreened")
            sp.log(output={"error": str(exc)})
            return first[0], dict(first[1], screen_error=str(exc))
        sp.log(output={"winner": res.winner, "ranking": res.ranking, "spent_steps": res.spent_steps})
    for rec in res.records:
        append_journal(loop.journal_path, dict(rec, n=n, tag=loop.tag))
    index = res.winner if res.winner is not None else 0
    proposal, info = candidates[index]
    seconds = time.monotonic() - t0
    summary = {"k": len(candidates), "winner": index, "ranking": res.ranking,
               "spent_steps": res.spent_steps, "seconds": round(seconds, 2),
               "labels": labels}
    note = f" [screened: won {len(candidates)}-way successive halving]"
    # The proposal time of the whole screen is part of this experiment's overhead.
    extra = sum(i.get("seconds", 0.0) for _, i in candidates if i is not info)
    info = dict(info, screen=summary, seconds=info.get("seconds", 0.0) + extra + seconds)
    return replace(proposal, notes=(proposal.notes + note).strip()), info
