"""Step 3 (agent/between.py): the reviewer's boundary step gets a BoundaryContext built from the
loop's files, history and coordinator; what it returns is journaled, experiments join the history."""
from types import SimpleNamespace

from agent import between, seeds
from agent.experiment import MAX_RERUNS
from agent.coordinator import Coordinator
from agent.judges.reviewer import BoundaryContext
from agent.workspace import RunFiles
from harness.experiment_record import ExperimentRecord
from harness.results import read_journal

A, B, C = "a" * 40, "b" * 40, "c" * 40


def test_the_boundary_gets_a_context_and_its_records_are_journaled(tmp_path, monkeypatch):
    seen = []

    class Reviewer:
        def boundary(self, ctx):
            seen.append(ctx)
            return [{"kind": "audit", "tag": "t", "n": 3}, {"kind": "experiment", "tag": "t", "n": 4, "status": "keep"}]

    files = RunFiles(tmp_path, "t", tmp_path, tmp_path)
    coord = Coordinator(A)
    phases = []
    coord.in_flight.update({n: None for n in range(1, 7)})   # numbers handed out: a re-measurement takes 7
    slot = SimpleNamespace(files=files)
    status = SimpleNamespace(phase=lambda phase, n=None: phases.append(phase))
    ran = []
    the_run = SimpleNamespace(extra={})
    monkeypatch.setattr(between, "run_commit", lambda slot, n, commit, log_name, env, status=None:
                        ran.append((slot, n, commit, log_name, env)) or the_run)
    between.apply(Reviewer(), coord, slot, status)

    assert [r["kind"] for r in read_journal(files.journal_path, kind=None)[0]] == ["audit", "experiment"]
    assert [(type(r), r.n) for r in coord.history] == [(ExperimentRecord, 4)]   # the audit is no experiment
    (ctx,) = seen
    assert isinstance(ctx, BoundaryContext) and ctx.files is files and ctx.history is coord.history
    ctx.on_moved(B, None)                                   # a decision applied, the best unchanged
    assert (coord.last_kept, coord.best) == (B, None)
    ctx.on_moved(C, {"commit": C, "val_bpb": 1.0})
    assert (coord.last_kept, coord.best) == (C, {"commit": C, "val_bpb": 1.0})
    # a re-measurement: the loop's run of the commit, numbered as the next experiment, phase training
    assert ctx.train(B) is the_run
    assert [r[:4] for r in ran] == [(slot, 7, B, f"queue-{B[:7]}.log")] and phases == ["training"]
    # on a seed of its own, recorded, none of the loop's (train.py's own SEED would say "a queue run")
    seed = int(ran[0][4]["AUTORESEARCH_SEED"])
    assert the_run.extra["seed"] == seed and seed not in seeds.loop_seeds(seeds.key_of(tmp_path), 7, MAX_RERUNS)
