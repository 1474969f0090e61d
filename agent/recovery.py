"""--resume: bring journal, results.tsv, git and processes back into agreement after any stop.

Invariants restored (the loop's write order makes each case recoverable):
1. No orphan: a child process group recorded in child.pid that still runs in the worktree is killed.
2. Every experiment exactly once: a torn last line of results.tsv, journal.jsonl or traces.jsonl
   is cut off and kept in <file>.torn-<time> (harness/results.py). Then journal records and
   results.tsv rows are matched one by one, in order, on (commit, status): a record without its
   row gets the row (derived from the record) inserted at its place; a row without a record gets
   a minimal record marked "recovered". Duplicate records of one n are ignored.
3. Discarded commits stay reachable: a discard/crash record whose ref is missing gets it.
4. An experiment that was committed but not recorded (its "pending" journal line has no record;
   the loop died while it trained) is RE-RUN on the same commit: its proposal is preserved in git
   and a killed run has no result to record. If its parent is no longer the last kept commit, it
   cannot be re-run faithfully: the commit is kept under refs/autoresearch/<tag>/interrupted/<n>
   and a journal line drops it.
5. The branch points at the last kept commit (or at the pending commit about to be re-run).

The tag's state is read from the journal and git alone (agent/coordinator.py derives the tip and
the best from the journal's records); results.tsv is only repaired from them, and gives a minimal
record only for a row whose journal line was lost.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from agent.experiment import Attempt
from agent.workspace import RunFiles
from agent.coordinator import PENDING_KIND, Coordinator, PendingFile, undecided
from agent.proposing import ProposalInfo
from agent import gitops
from runfiles.matching import match_rows
from runfiles.journal import QueueAppliedRecord
from harness.experiment_record import ExperimentRecord
from harness.results_table import ResultRow
from runfiles.run import best_of
from harness.results import (append_journal, is_json_object, read_journal, read_results, repair_torn,
                             rewrite_results)
from harness.runner import kill_leftover
from runfiles.state import read_json


@dataclass
class Recovered:
    """What reconcile found: the tag's decided state (the journal's, agent/coordinator.py derives
    the tip and the best from it) and the experiment to run again."""
    history: list[ExperimentRecord]      # the journal's experiment records, in journal order
    moves: list                          # the journal's branch moves outside experiments (Coordinator.moves)
    last_kept: str                       # where the branch points: the last event that moved it
    best: dict | None                    # {"commit", "val_bpb"} of last_kept, None while at the base
    rerun: Attempt | None                # committed but not recorded: run it again
    notes: list[str] = field(default_factory=list)   # what was repaired, for the user


def reconcile(files: RunFiles, base: str) -> Recovered:
    """Repair the run folder of the tag in `files` (`base`: its base commit, run.json) and return
    what it holds; the branch is reset to the last kept commit (or to the one to re-run)."""
    notes = []
    killed = kill_leftover(files.run_dir)
    if killed:
        notes.append(killed)
    for path, complete in ((files.results_path, None), (files.journal_path, is_json_object),
                           (files.run_dir / "traces.jsonl", is_json_object)):
        torn = repair_torn(path, complete)
        if torn:
            notes.append(torn)
    notes += _pending_files_into_journal(files)
    journal, problems = read_journal(files.journal_path, kind=None)
    notes += [f"journal {p} (skipped)" for p in problems]
    records, moves = _state_of(journal, notes)
    notes += _match_records_and_rows(files, records, read_results(files.results_path))
    # what is still wrong once the journal's rows are back (a replaced row is no longer)
    notes += [f"results.tsv {p} (left as is)" for p in read_results(files.results_path).problems]

    for rec in records:
        ref = rec.discarded_ref
        if ref and rec.commit and not gitops.ref_exists(files.repo, ref):
            gitops.update_ref(files.repo, ref, rec.commit)
            notes.append(f"git: restored {ref}")

    state = _derived(base, records, moves)
    last_kept, best = state.tip()
    rerun = _pending(files, journal, records, base, last_kept, notes)
    gitops.reset_hard(files.worktree, rerun.commit if rerun else last_kept)
    return Recovered(records, moves, last_kept, best, rerun, notes)


def _state_of(journal: list[dict], notes: list[str]) -> tuple[list[ExperimentRecord], list]:
    """The journal's experiment records (journal order: with --workers, not number order; a second
    record of one n ignored) and its branch moves outside experiments: human-queue decisions
    applied at a boundary (kind "queue_applied", action restore or revert, agent/judges/queue_apply.py),
    each after the experiment records before it (Coordinator.moves)."""
    seen, records, moves = set(), [], []
    for raw in journal:
        rec = ExperimentRecord.from_dict(raw)
        if not rec.is_experiment:
            applied = QueueAppliedRecord.from_dict(raw)
            if applied is not None and applied.moved_branch:
                moves.append((len(records), applied.commit,
                              best_of(applied.commit, applied.trusted_bpb) if applied.trusted_bpb is not None else None))
            continue
        key = rec.n if isinstance(rec.n, (int, str, type(None))) else repr(rec.n)   # a hostile n stays hashable
        if key in seen:
            notes.append(f"journal: duplicate record for experiment {rec.n} ignored")
            continue
        seen.add(key)
        records.append(rec)
    return records, moves


def _derived(base: str, records: list[ExperimentRecord], moves: list) -> Coordinator:
    state = Coordinator(base)
    state.history[:], state.moves[:] = records, moves
    return state


def branch_head(journal_path, base: str) -> tuple[str, float | None]:
    """The commit the branch should point at and its val_bpb, from the journal alone: the last
    event that moved it (a kept experiment, a human-queue decision applied)."""
    journal, _ = read_journal(journal_path, kind=None)
    head, best = _derived(base, *_state_of(journal, [])).tip()
    return head, best["val_bpb"] if best else None


def _pending(files: RunFiles, journal: list[dict], records, base, last_kept, notes) -> Attempt | None:
    """The single loop's experiment committed but not recorded (the journal's last undecided
    "pending" line without a worker), to run again; one that cannot be is given up by a journal
    line saying why (its commit is kept under refs/.../interrupted/<n> where it still exists)."""
    recorded = {r.number for r in records}
    single = [p for p in undecided(journal) if p.worker is None and p.n not in recorded]
    if not single:
        return None
    *older, pending = single
    for p in older:   # a loop carries one experiment at a time: an older one was left by a crash of its own
        _give_up(files, p, f"superseded by experiment {pending.n}", notes)
    n, commit, parent = pending.n, pending.commit, pending.parent
    if not commit or not gitops.rev_parse(files.repo, commit):
        _give_up(files, pending, f"pending commit {commit} not found; it will be proposed anew", notes)
        return None
    runnable = (parent == last_kept) or (parent is None and commit == base == last_kept)
    if not runnable:
        _give_up(files, pending, "its parent is no longer the last kept commit", notes)
        return None
    source = gitops.show_file(files.repo, commit, "train.py")
    a = Attempt(n=n, parent=parent, proposal=pending.proposal(source), info=replace(ProposalInfo.from_dict(pending.info), resumed=True),
                commit=commit, attempts=pending.attempts)
    notes.append(f"experiment {n} was committed but not recorded ({commit[:7]}): re-running it")
    return a


def _pending_files_into_journal(files: RunFiles) -> list[str]:
    """A run folder an earlier version left: its pending.json / pending-wK.json (the experiment in
    flight, before it was a journal line) become pending lines, then go."""
    notes = []
    for path in sorted(files.run_dir.glob("pending*.json")):
        raw = read_json(path)
        digits = path.stem.removeprefix("pending-w")
        worker = int(digits) if digits.isdigit() else None
        p = PendingFile.from_dict({**raw, "kind": PENDING_KIND, "worker": worker}) if isinstance(raw, dict) else None
        if p is not None:
            append_journal(files.journal_path, p.as_line())
            notes.append(f"experiment {p.n}: {path.name} (an earlier version's) moved into the journal")
        path.unlink(missing_ok=True)
    return notes


def _give_up(files: RunFiles, p: PendingFile, why: str, notes: list[str]) -> None:
    """A pending experiment that is not run again: its commit kept under the interrupted ref, and a
    journal line that drops it, so the next --resume does not meet it again."""
    note = f"experiment {p.n}: {why}"
    if p.commit and gitops.rev_parse(files.repo, p.commit):
        ref = f"{gitops.REF_PREFIX}{files.tag}/interrupted/{p.n}"
        gitops.update_ref(files.repo, ref, p.commit)
        note += f"; kept it under {ref}"
    append_journal(files.journal_path, replace(p, dropped=why).as_line())
    notes.append(note)


def _match_records_and_rows(files: RunFiles, records: list[ExperimentRecord], table) -> list[str]:
    """Align journal records and results.tsv rows in order; rebuild what either side lacks. A
    record that has no row by design (a baseline try that was not kept) is left out."""
    tabled = [r for r in records if r.in_results]
    rows = table.rows
    row_of = {j: i for i, j in match_rows(rows, tabled).items()}   # record index -> row index
    notes = []
    missing = [i for i in range(len(tabled)) if i not in row_of]
    if missing:
        notes += _rebuild_rows(files, tabled, table, row_of, missing)
    # A row of a record without one by design (a failed baseline try, in a file written before
    # they stayed in the journal only) is not an orphan: it stays as it is.
    matched_rows = set(row_of.values()) | set(match_rows(rows, records))
    orphans = [j for j in range(len(rows)) if j not in matched_rows]
    if orphans:
        found = _recover_records(files, records, tabled, rows, row_of, orphans)
        records += found
        notes += [f"journal: recovered a minimal record of experiment {r.n} from results.tsv" for r in found]
    return notes


def _row_of_record(r: ExperimentRecord) -> str:
    return ResultRow(r.commit, r.row_bpb, r.memory_gb, r.status, r.description or "").format()


def _rebuild_rows(files, records, table, row_of, missing) -> list[str]:
    """Put the rows of `missing` records at their place: a malformed line that is one of them
    (its commit and status say so) is replaced where it stands, the others are inserted; every
    other line stays as it was."""
    rows = table.rows
    lines = files.results_path.read_text(encoding="utf-8", errors="replace").splitlines(True)[1:]
    rec_at_line = {rows[j].line: i for i, j in row_of.items()}   # file line number -> record
    bad = [ln for ln in table.lines if not ln.ok]
    replaced = {bad[b].line: missing[m] for b, m in
                match_rows(bad, [records[i] for i in missing], loose=True).items()} if bad else {}
    rec_at_line.update(replaced)
    todo, out = [i for i in missing if i not in replaced.values()], []
    for number, line in enumerate(lines, start=2):
        i = rec_at_line.get(number)
        while i is not None and todo and todo[0] < i:
            out.append(_row_of_record(records[todo.pop(0)]))
        if number in replaced:
            out.append(_row_of_record(records[replaced[number]]))
            continue
        out.append(line if line.endswith("\n") else line + "\n")
    out += [_row_of_record(records[i]) for i in todo]
    rewrite_results(files.results_path, out)
    return [f"results.tsv: {'replaced the malformed row' if i in replaced.values() else 'rebuilt the missing row'} "
            f"of experiment {records[i].n} from the journal" for i in missing]


def _recover_records(files, records, tabled, rows, row_of, orphans) -> list[ExperimentRecord]:
    """A minimal journal record for each row that has none (its journal line was lost).
    `row_of` indexes `tabled` (the records with a row); numbers stay clear of all `records`."""
    found, used = [], {r.number for r in records}
    for j in orphans:
        before = [tabled[i].number or 0 for i, jj in row_of.items() if jj < j]
        n = (max(before) if before else 0) + 1
        while n in used:
            n += 1
        used.add(n)
        row = rows[j]
        full = gitops.rev_parse(files.repo, row.commit) or row.commit
        rec = ExperimentRecord.of(n=n, tag=files.tag, commit=full, short=full[:7], status=row.status,
                               description=row.description,
                               summary={"val_bpb": row.figure} if row.figure is not None else None,
                               memory_gb=row.memory_gb, recovered=True,
                               decision_reason="recovered from results.tsv (journal line lost)")
        append_journal(files.journal_path, rec.to_dict())
        found.append(rec)
    return found
