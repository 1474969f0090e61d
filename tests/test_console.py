"""The console's phase feedback: the rich panel rendered to a string.

During training the panel shows step, loss, tok/s and the *training* clock parsed from the
running log (apart from the wall clock since launch, which includes startup) and the log's path;
in evaluating/judging a clock that moves; interim decisions ("baseline run 1/2 ...; rerunning")
as the last decision; the terminal prints the trusted val_bpb (the one results.tsv records).
"""
import io
import time

from rich.console import Console as RichConsole

from agent import console as con
from agent import loop as loop_mod
from agent.judges.reviewer import Decision, SimpleReviewer
from harness.experiment_record import ExperimentRecord
from tests.loop_fixtures import fake_repo

# train.py's progress line format (train.py: the print in the training loop)
LINE = "step {:05d} | loss {:.6f} | lrm 1.000 | dt 40ms | tok/s {:,.0f} | epoch 0 | trained {:.1f}s"


def text_of(table, width=120) -> str:
    rc = RichConsole(record=True, file=io.StringIO(), width=width, force_terminal=False)
    rc.print(table)
    return rc.export_text()


def test_parse_progress_takes_the_last_line_of_trains_format():
    text = "\n".join(["profile cpu | device cpu", LINE.format(11, 3.5, 49000, 1.1),
                      LINE.format(12, 3.2, 51200, 1.2), "step 0001"])
    assert con.parse_progress(text) == {"step": 12, "loss": 3.2, "tok_s": 51200.0, "trained": 1.2}
    assert con.parse_progress("no progress yet\n") is None


def test_training_panel_shows_step_loss_toks_training_clock_and_log(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    started = time.time() - 40
    (logs / "exp-0002.log").write_text("old run\n")
    import os
    os.utime(logs / "exp-0002.log", (started - 600, started - 600))   # an older experiment's log
    (logs / "exp-0003.fix0.log").write_text("crashed try\n")
    os.utime(logs / "exp-0003.fix0.log", (started - 60, started - 60))  # the same experiment, before this run
    (logs / "exp-0003.log").write_text("\n".join(LINE.format(s, 4.0 - s / 100, 51200, s * 0.1)
                                                  for s in range(1, 226)) + "\n")
    log, progress = con.run_progress(tmp_path, "training", started, 3)
    assert log == "logs/exp-0003.log"
    assert con.run_progress(tmp_path, "training", started, 4) == (None, None), "not yet created"
    assert con.run_progress(tmp_path, "judging", started, 3) == (None, None), "no run in flight"
    state = {"phase": "training", "experiment": 3, "run_started_at": started, "log": log,
             "progress": progress, "phase_started_at": started, "started_at": started - 3600,
             "last_decision": "exp 2 discard: worse than the best", "cost_usd": 0.0123}
    out = text_of(con.render_panel("may29", 300, state, now=started + 40))
    assert "step 225" in out and "loss 1.7500" in out and "51,200 tok/s" in out
    assert "trained 22.5s of 300s" in out, out          # the training clock, not the wall clock
    assert "40s since launch" in out                    # the wall clock, said to include startup
    assert "logs/exp-0003.log" in out
    assert "exp 2 discard: worse than the best" in out and "$0.0123" in out
    assert "1h00m since the loop started" in out


def test_training_panel_before_the_first_step():
    state = {"phase": "training", "experiment": 1, "run_started_at": 100.0, "phase_started_at": 100.0}
    out = text_of(con.render_panel("t", 300, state, now=105.0))
    assert "starting (imports, model build, warm-up)" in out and "5s since launch" in out


def test_evaluating_and_judging_clocks_move():
    base = {"experiment": 4, "run_started_at": 1000.0, "phase_started_at": 1300.0,
            "progress": {"step": 900, "loss": 2.5, "tok_s": 5000.0, "trained": 300.0}, "log": "logs/exp-0004.log"}
    ev1 = text_of(con.render_panel("t", 300, dict(base, phase="evaluating"), now=1310.0))
    ev2 = text_of(con.render_panel("t", 300, dict(base, phase="evaluating"), now=1375.0))
    assert "evaluating for 10s" in ev1 and "evaluating for 1m15s" in ev2
    assert "the trusted evaluator measures the saved model (training done: 900 steps)" in ev2
    assert "logs/exp-0004.log" in ev2
    assert "trained 300.0s of 300s" not in ev2, "no training clock that reads as a hung run"
    judging = text_of(con.render_panel("t", 300, dict(base, phase="judging"), now=1430.0))
    assert "judging for 2m10s" in judging
    assert "since launch" not in judging, "no run clock once the run has ended"


def test_live_console_redraws_on_its_own(tmp_path):
    """The Live panel re-renders from the state on every refresh (get_renderable), so the clock
    moves while the loop is blocked in a child; rendered into a recording rich console."""
    rc = RichConsole(record=True, file=io.StringIO(), width=110, force_terminal=True)
    c = con.Console("live", 300, live=True, rich_console=rc)
    try:
        c.update({"phase": "judging", "experiment": 2, "phase_started_at": time.time() - 61})
        time.sleep(1.2)     # at least two refreshes by rich's thread
        c.event("exp 1: baseline run 1/2: 2.700000; rerunning to measure the noise")
    finally:
        c.close()
    out = rc.export_text()
    clocks = {f"judging for 1m{k:02d}s" for k in range(1, 5) if f"judging for 1m{k:02d}s" in out}
    assert len(clocks) >= 2, f"the clock did not move between refreshes: {out[-800:]}"
    assert "rerunning to measure the noise" in out


def test_decision_line_prints_the_trusted_figure():
    rec = ExperimentRecord.from_dict({"n": 5, "short": "abc1234", "status": "keep", "description": "deeper",
                                      "decision_reason": "better", "summary": {"val_bpb": 2.691109},
                                      "trusted_bpb": 2.685143})
    assert "val_bpb 2.685143" in con.decision_line(rec) and "2.691109" not in con.decision_line(rec)
    rec.trusted_bpb = None     # no trusted figure (simple reviewer): the printed one, as results.tsv
    assert "val_bpb 2.691109" in con.decision_line(rec)


class RerunOnce(SimpleReviewer):
    """Asks for one more run of the baseline, like the judge hierarchy's baseline repeats."""

    def __init__(self):
        self.seen = 0

    def judge(self, ctx, run):
        d = super().judge(ctx, run)
        self.seen += 1
        if ctx.n == 1 and self.seen == 1:
            return Decision.again("keep", "baseline run 1/2: 1.020000; rerunning to measure the noise")
        return d


def test_interim_decisions_reach_the_console_and_the_state(tmp_path, monkeypatch, capsys):
    repo = fake_repo(tmp_path / "repo")
    monkeypatch.setenv("FAKE_DATA_DIR", str(tmp_path / "fakedata"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setattr(loop_mod, "build_reviewer", lambda *a, **k: RerunOnce())
    monkeypatch.setenv("FAKE_SLEEP", "1.5")   # each run outlives the 1 s state refresh
    seen = []
    args = loop_mod.parse_args(["--tag", "s", "--budget", "1", "--repo", str(repo), "--max-experiments", "1",
                                "--reviewer", "simple", "--proposer", "offline", "--baseline-repeats", "2"])
    lp = loop_mod.Loop(args)
    real_update = lp.panel.console.update
    lp.panel.console.update = lambda state: (seen.append(dict(state)), real_update(state))
    lp.run()
    lp.stop()
    out = capsys.readouterr().out
    # an interim call is a note, never a verdict: the last decision shown is only the final one
    assert "exp 1: not decided yet: baseline run 1/2: 1.020000; rerunning to measure the noise" in out
    assert not [s for s in seen if "rerunning" in str(s.get("last_decision"))]
    assert "exp 1: run 2 of 2 (measuring the noise)" in out
    trains = [s for s in seen if s["phase"] in ("training", "evaluating") and s.get("log")]
    assert {s["log"] for s in trains} == {"logs/exp-0001.log", "logs/exp-0001.rerun1.log"}
    # while it runs, state.json says what is tried and which run of it
    assert all(s["idea"]["description"] == "baseline (unmodified train.py)" for s in trains)
    assert {(s["run"]["k"], s["run"]["of"]) for s in trains} == {(1, 2), (2, 2)}
    after = seen[next(i for i, s in enumerate(seen) if s.get("run") and s["run"]["k"] == 2):]
    assert {s["log"] for s in after if s.get("log")} == {"logs/exp-0001.rerun1.log"}, "never the old run's log"
    assert seen[-1]["idea"] is None and seen[-1]["run"] is None, "a decided experiment is no longer shown"
    assert "training (log logs/exp-0001.log)" in out, "plain mode names the running log"


def test_offline_fallback_data_is_said_loudly():
    assert "not comparable" in con.data_warning({"source": "offline-fallback", "fingerprint": "015a2b47a3cf"})
    assert con.data_warning({"source": "climbmix"}) is None


def test_the_loop_draws_the_live_panel_on_a_terminal(tmp_path):
    """The loop on a pseudo-terminal: the live panel (not plain lines) with the running log, then
    the end summary after the panel is closed."""
    import os
    import pty
    import re
    import subprocess
    from tests.loop_fixtures import fake_env, loop_cmd
    repo = fake_repo(tmp_path / "repo")
    env = dict(fake_env(tmp_path), FAKE_SLEEP="1.5", COLUMNS="110", LINES="40", TERM="xterm")
    master, slave = pty.openpty()
    p = subprocess.Popen(loop_cmd("--tag", "tty", "--budget", "1", "--max-experiments", "2"), cwd=repo, env=env,
                         stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:       # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert p.wait(timeout=60) == 0
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
    assert "│ phase" in screen and "training for" in screen and "since launch" in screen
    assert "logs/exp-0002.log" in screen and "│ last decision │ exp 1 keep" in screen
    assert "] exp 1: training" not in screen, "no plain lines on a terminal"
    assert screen.index("== autoresearch tty: stopped") > screen.rindex("│ phase"), "the summary comes last"


def test_the_panel_says_the_idea_and_which_run_while_it_runs():
    state = {"phase": "training", "experiment": 2, "run_started_at": 100.0, "phase_started_at": 100.0,
             "idea": {"description": "DEPTH 4 -> 3", "hypothesis": "a shallower model trains more steps",
                      "proposer": "offline"},
             "run": {"k": 2, "of": 5, "why": "confirming a possible gain"}}
    out = text_of(con.render_panel("t", 300, state, now=110.0))
    assert "DEPTH 4 -> 3 -- hypothesis: a shallower model trains more steps" in out
    assert "run 2 of 5 (confirming a possible gain), 10s since launch" in out
    idle = text_of(con.render_panel("t", 300, dict(state, phase="idle", idea=None, run=None), now=110.0))
    assert "DEPTH 4 -> 3" not in idle and "confirming" not in idle
