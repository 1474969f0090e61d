"""The human queue from the command line.

    uv run agent/review_queue.py [--run DIR] list [--status pending|approved|rejected|applied|all]
    uv run agent/review_queue.py [--run DIR] show ID
    uv run agent/review_queue.py [--run DIR] approve ID [--note TEXT] [--who NAME]
    uv run agent/review_queue.py [--run DIR] reject ID [--note TEXT] [--who NAME]

DIR is a run's folder (the worktree, where queue.sqlite lives); by default the most recently
active run under ./.autoresearch/. Deciding only records the decision: the running loop applies it
at its next experiment boundary (approve a discarded experiment: restored onto the branch and
re-measured; reject a kept one: reverted).
"""
from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import sys
from pathlib import Path

from runfiles.queue_store import QueueError, QueueStore

QUEUE_FILE = "queue.sqlite"
RUNS_ROOT = ".autoresearch"
# Files that mark a run's folder (docs/contracts.md: "A run's folder").
RUN_FILES = ("results.tsv", "journal.jsonl", "state.json", "run.json")
# Characters of the diff printed by `show` (the whole diff is in the payload and the dashboard).
SHOW_DIFF_CHARS = 6000


def find_run(root: Path) -> Path | None:
    """The run folder under root/.autoresearch whose queue or journal changed last."""
    runs = [p for p in (root / RUNS_ROOT).glob("*") if p.is_dir()]
    scored = []
    for p in runs:
        stamps = [f.stat().st_mtime for f in (p / QUEUE_FILE, p / "journal.jsonl", p / "state.json") if f.exists()]
        if stamps:
            scored.append((max(stamps), p))
    return max(scored)[1] if scored else None


def is_run_folder(path: Path) -> bool:
    """A folder the loop writes (it may have no queue yet: the queue is made at the first escalation)."""
    return any((path / name).exists() for name in RUN_FILES)


def _when(t) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") if t else "-"


def cmd_list(q: QueueStore, status: str) -> int:
    items = q.list(None if status == "all" else status)
    if not items:
        print(f"no {'' if status == 'all' else status + ' '}items")
        return 0
    print(f"{'id':>4}  {'status':<9} {'kind':<13} {'exp':>4}  {'commit':<8} {'created':<16}  reason")
    for it in items:
        print(f"{it.id:>4}  {it.status:<9} {it.kind:<13} {str(it.experiment or '-'):>4}  "
              f"{(it.commit or '-')[:7]:<8} {_when(it.created_at):<16}  {it.reason[:100]}")
    return 0


def cmd_show(q: QueueStore, item_id: int) -> int:
    it = q.get(item_id)
    if it is None:
        print(f"error: no queue item {item_id}", file=sys.stderr)
        return 1
    e = it.escalation
    print(f"item {it.id}: {it.kind} — {it.status}"
          + (f" by {it.decision.by} at {_when(it.decision.at)}" if it.decision.by else ""))
    print(f"experiment {it.experiment}  commit {it.commit}  tag {it.tag}")
    print(f"reason: {it.reason}")
    if it.decision.note:
        print(f"note: {it.decision.note}")
    if it.applied.result:
        print(f"applied: {it.applied.result}")
    print(f"\n{e.description}\nhypothesis: {e.hypothesis}")
    print(f"status at escalation: {e.status}   discarded ref: {e.discarded_ref or '-'}")
    print("figures: " + json.dumps(e.figures, default=str))
    for who, op in (("rule", e.rule), ("llm", e.llm)):
        if op:
            print(f"{who} judge: {op.status} (confidence {op.confidence}): {op.reason}"
                  + (f" [error: {op.error}]" if op.error else ""))
    if e.metajudge:
        print(f"metajudge: {e.metajudge}")
    if e.verify_reason:
        print(f"verify: {e.verify_reason}")
    if e.diff:
        print("\n" + e.diff[:SHOW_DIFF_CHARS] + ("\n... (diff truncated)" if len(e.diff) > SHOW_DIFF_CHARS else ""))
    return 0


def cmd_decide(q: QueueStore, item_id: int, decision: str, who: str, note: str) -> int:
    try:
        it = q.decide(item_id, decision, who=who, note=note)
    except QueueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    effect = {("approved", "discard"): "the loop will restore it onto the branch and re-measure it",
              ("rejected", "keep"): "the loop will revert it on the branch"}.get(
        (it.status, it.escalated_status), "nothing changes on the branch")
    print(f"item {it.id} {it.status} by {who}: {effect} (at its next experiment boundary)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Review the judge hierarchy's escalations.", allow_abbrev=False)
    ap.add_argument("--run", default=None, help="the run folder (default: latest under ./.autoresearch)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="list queue items", allow_abbrev=False)
    ls.add_argument("--status", default="pending", choices=("pending", "approved", "rejected", "applied", "all"))
    sh = sub.add_parser("show", help="show one item: figures, opinions, diff", allow_abbrev=False)
    sh.add_argument("id", type=int)
    for name in ("approve", "reject"):
        d = sub.add_parser(name, help=f"{name} a pending item", allow_abbrev=False)
        d.add_argument("id", type=int)
        d.add_argument("--note", default="", help="why (kept with the decision, in git notes and journal)")
        d.add_argument("--who", default=None, help="your name (default: the login name)")
    args = ap.parse_args(argv)

    run = Path(args.run) if args.run else find_run(Path.cwd())
    if run is not None and not (run / QUEUE_FILE).exists() and is_run_folder(run):
        # a run whose judges have escalated nothing yet: an empty queue, not an error
        if args.cmd == "list":
            print(f"no {'' if args.status == 'all' else args.status + ' '}items (no escalation yet in {run})")
            return 0
        print(f"error: no queue item {args.id} ({run} has no escalation yet)", file=sys.stderr)
        return 1
    if run is None or not (run / QUEUE_FILE).exists():
        where = run or Path.cwd() / RUNS_ROOT
        print(f"error: no human queue at {where} (give --run DIR: a run folder with {QUEUE_FILE})", file=sys.stderr)
        return 2
    q = QueueStore(run / QUEUE_FILE)
    if args.cmd == "list":
        return cmd_list(q, args.status)
    if args.cmd == "show":
        return cmd_show(q, args.id)
    who = args.who or _login()
    return cmd_decide(q, args.id, args.cmd, who, args.note)


def _login() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "human"


if __name__ == "__main__":
    sys.exit(main())
