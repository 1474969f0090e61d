"""scripts/bench_load.py: the bench's changing load is real CPU burners that start and stop, and
its figures count a gain that was discarded without going to the human queue."""
import importlib.util
import time
from types import SimpleNamespace

from tests.loop_fixtures import REPO

spec = importlib.util.spec_from_file_location("bench_load", REPO / "scripts" / "bench_load.py")
bench_load = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_load)


def alive(load):
    return [p for p in load._running if p.poll() is None]


def test_the_load_starts_and_stops_and_leaves_nothing_behind():
    load = bench_load.BackgroundLoad(procs=1, on_s=(0.3, 0.3), off_s=(0.3, 0.3), seed=1).start()
    deadline = time.time() + 30
    while time.time() < deadline and len([e for e in load.events if e[1] == "off"]) < 2:
        time.sleep(0.05)
    kinds = [e[1] for e in load.events]
    procs = list(load._running)
    load.stop()
    assert kinds.count("on") >= 2 and kinds.count("off") >= 2, kinds
    assert all(p.poll() is not None for p in procs) and not alive(load)
    assert 0.0 < load.fraction_on() < 1.0


def test_the_figures_count_gains_discarded_without_escalation():
    edits = {2: SimpleNamespace(kind="null", size=0), 3: SimpleNamespace(kind="gain", size=5),
             4: SimpleNamespace(kind="gain", size=5), 5: SimpleNamespace(kind="gain", size=3)}
    contested = {"judge": {"escalations": [{"kind": "contested", "id": 1}]}}
    records = [{"n": 2, "status": "discard"}, {"n": 3, "status": "keep", "evidence": {"paired": {"pairs": 2}}},
               {"n": 4, "status": "discard", "verdicts": contested}, {"n": 5, "status": "discard"}]
    f = bench_load.load_figures(records, edits, None)
    assert (f["nulls_kept"], f["nulls"], f["gains3_kept"], f["gains3"]) == (0, 1, 1, 3)
    assert f["gains_discarded_without_escalation"] == [5] and f["gains_contested"] == [4]
    assert f["decisions_paired"] == 1
    assert "without escalation 1 [5]" in bench_load.render(dict(f, load_on_fraction=0.5))
