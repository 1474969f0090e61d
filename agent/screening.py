"""`--screen K`: the proposer makes K candidate edits, a short successive-halving screen picks one.

Only the winner gets the loop's full wall-clock run (and the judges). The screen trains each
candidate for a few hundred steps at most through search/halving.py (step budgets, checkpoint
promotion, a short cool-down branch before each rung's evaluation), so it costs a fraction of one
full run. Every screened candidate is journaled (kind "screen", with its experiment number), so
the losers are never lost: their sources sit under the run folder's screen/NNNN/candidates/.
Sealed, each rung is scored by the trusted evaluator on a proxy split held out from every
candidate (search/proxy.py), never by a figure a candidate printed.

The screen never sees the loop: it gets a `Screen`, what it reads and calls, built by the loop
for one experiment (the tag's files, the seal, the tag's state at that moment, the proposers,
the guard, the console, the phase).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Callable

from agent.judges.reviewer import ExperimentContext, GuardVerdict
from agent.coordinator import InFlight
from agent.proposers.base import Proposal, ProposalRequest
from agent.proposing import Proposers, call_proposer
from agent.workspace import RunFiles
from agent import gitops
from search.proxy import make_proxy
from harness.results import append_journal
from harness.verify import PROXY_EVAL_TOKENS_MAX, eval_rows

# Steps of the screen's first rung (later rungs multiply it by the screen's eta).
SCREEN_MIN_STEPS = 20


def proxy_tokens(profile: str | None) -> int | None:
    """Tokens of a proxy evaluation: the profile's EVAL_TOKENS, capped (a screen ranks, it does not measure)."""
    return PROXY_EVAL_TOKENS_MAX if profile == "gpu" else None


@dataclass(frozen=True)
class Standing:
    """Where the tag stands when experiment n is screened: what every candidate is proposed
    against and guarded against."""
    parent: str                   # the last kept commit: the candidates' parent
    history: list                 # the decided records
    best: dict | None             # {"commit", "val_bpb"}


@dataclass(frozen=True)
class Screen:
    """What a screen of experiment n reads and calls (the loop builds one per screen)."""
    k: int                        # --screen K: candidates asked for
    seed: int                     # --seed
    files: RunFiles               # the tag: journal, run folder (screen/NNNN/, the proxy split), worktree
    seal: object                  # agent/workspace.py make_seal's seal (None or unsealed: the candidates run open)
    profile: str | None           # run.json's profile (None: $AUTORESEARCH_PROFILE)
    standing: Standing
    proposers: Proposers
    request: Callable[..., ProposalRequest]    # request(n, source, pending=[InFlight]) (Loop.request)
    guard: Callable[[ExperimentContext], GuardVerdict]   # the reviewer's guard
    say: Callable[[str], None]                 # a console event line
    set_phase: Callable[..., None]             # set_phase(phase, n)
    tracer: object


def gather(s: Screen, n: int, source: str, first: tuple[Proposal, dict]) -> list[tuple[Proposal, dict]]:
    """K distinct proposals for experiment n: `first`, then K-1 more, each request seeing the
    candidates already gathered (as pending history) so a proposer does not repeat itself."""
    got = [first]
    seen = {first[0].source}
    tries = 0
    while len(got) < s.k and tries < 2 * s.k:
        tries += 1
        pending = [InFlight.of(n, s.standing.parent, replace(p, description=f"(screen candidate) {p.description}"))
                   for p, _ in got]
        proposal, info = call_proposer(s.proposers, s.request(n, source, pending=pending))
        if proposal.source in seen or proposal.source == source:
            continue
        seen.add(proposal.source)
        got.append((proposal, info))
    return got


def guarded(s: Screen, n: int, source: str, candidates: list[tuple[Proposal, dict]]) -> list[tuple[Proposal, dict]]:
    """The candidates the guard passes; each rejection is journaled (kind "screen"), none trains."""
    f, st = s.files, s.standing
    kept = []
    for i, (p, info) in enumerate(candidates):
        ctx = ExperimentContext(n=n, tag=f.tag, worktree=f.worktree, parent=st.parent, commit=None,
                                old_source=source, new_source=p.source, diff=gitops.text_diff(source, p.source), proposal=p,
                                history=list(st.history), best=st.best, run_dir=f.run_dir)
        verdict = s.guard(ctx)
        if verdict.ok:
            kept.append((p, info))
            continue
        s.say(f"screen: guard rejected candidate {i} ({p.description}): {verdict.reason}")
        append_journal(f.journal_path, {"kind": "screen", "n": n, "tag": f.tag, "candidate": i,
                                        "label": p.description, "rejected": verdict.reason, "rungs": []})
    return kept


def pick(s: Screen, n: int, source: str, first: tuple[Proposal, dict]) -> tuple[Proposal, dict]:
    """Screen K candidates and return the winner (with the screen's summary in its info)."""
    from search.halving import screen   # imported lazily: only --screen runs need the pool

    run_dir = s.files.run_dir
    s.set_phase("proposing", n)
    candidates = guarded(s, n, source, gather(s, n, source, first))
    if not candidates:
        return first                 # all rejected: the first goes to the guard (and is recorded) as usual
    if len(candidates) < 2:
        return candidates[0]
    s.set_phase("screening", n)
    t0 = time.monotonic()
    labels = [p.description for p, _ in candidates]
    with s.tracer.span("screen", input={"n": n, "k": len(candidates), "labels": labels}) as sp:
        try:
            seal = s.seal
            sealed = seal is not None and seal.sealed and seal.data is not None
            proxy = make_proxy(seal.data, run_dir / ".sealed" / "proxy") if sealed else None
            profile = s.profile or os.environ.get("AUTORESEARCH_PROFILE")
            res = screen([p.source for p, _ in candidates], workdir=run_dir / "screen" / f"{n:04d}",
                         prepare_dir=s.files.worktree, labels=labels, min_steps=SCREEN_MIN_STEPS,
                         seed=s.seed, log=s.say,
                         sandbox=seal.sandbox if sealed else None, data=seal.data if sealed else None,
                         proxy=proxy, rows=eval_rows(profile), eval_tokens=proxy_tokens(profile))
        except Exception as exc:   # a broken screen must not stop the loop: run the first candidate
            s.say(f"screen failed ({exc}); running the first candidate unscreened")
            sp.log(output={"error": str(exc)})
            return first[0], replace(first[1], screen_error=str(exc))
        sp.log(output={"winner": res.winner, "ranking": res.ranking, "spent_steps": res.spent_steps})
    for rec in res.records:
        append_journal(s.files.journal_path, dict(rec, n=n, tag=s.files.tag))
    index = res.winner if res.winner is not None else 0
    proposal, info = candidates[index]
    seconds = time.monotonic() - t0
    summary = {"k": len(candidates), "winner": index, "ranking": res.ranking,
               "spent_steps": res.spent_steps, "seconds": round(seconds, 2),
               "labels": labels}
    note = f" [screened: won {len(candidates)}-way successive halving]"
    # The proposal time of the whole screen is part of this experiment's overhead.
    extra = sum(i.proposal_seconds for _, i in candidates if i is not info)
    info = replace(info, screen=summary,
                   seconds=info.proposal_seconds + extra + seconds)
    return replace(proposal, notes=(proposal.notes + note).strip()), info
