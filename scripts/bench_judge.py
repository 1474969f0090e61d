"""Does the judge keep what it should? Null edits and gains of known size through the real loop.

    uv run scripts/bench_judge.py --quick          # 20 null edits, 10 gains of 3 and 5 sigma
    uv run scripts/bench_judge.py                  # 24 null edits, 16 gains of 1, 2, 3 and 5 sigma
        [--steps 16] [--calibrate] [--baseline-repeats N] [--out out/bench_judge] [--keep]
    uv run scripts/bench_judge.py --load --budget 10   # under a changing load (scripts/bench_load.py)

(scripts/bench_proposers.py uses the same handicapped baseline to compare the offline searches.)

A throwaway repository holds this checkout's prepare.py and train.py, with one knob set badly
(HANDICAP: LOGIT_SOFTCAP 3.0 instead of 15, which caps how sure the model may be) as the tag's
baseline. The real loop (agent/loop.py's Loop: judge hierarchy, sealed runs in bubblewrap, the
trusted evaluation, every run with its own seed) then judges a scripted proposer's edits
(agent/proposers/scripted.py):

- null edits of the incumbent: semantic no-ops (a comment, a renamed variable, a reordered
  product) and knobs moved by 0.1%; a keep is a false keep;
- gains of known size from the handicapped baseline: the knob partly restored, by amounts that
  gain 1, 2, 3 or 5 sigma, sigma being the noise the judge itself measured (its pooled sigma once
  the null edits are decided, over the baseline's repeats and every confirming run). After a kept
  gain the bench puts the branch back on the baseline (a bench-only step), so every gain is judged
  against the same incumbent.

The gain a knob value buys comes from a calibration: direct runs of train.py (not through the
loop, seeds of their own) at a few knob values; a line of val_bpb on ln(value) through them is the
gain curve. It is stored in scripts/bench_judge_calibration.json and reused while the profile, the
steps, the data and train.py are the same (--calibrate measures it again). The calibration's own
spread is printed beside the judge's but is not the unit: seed noise here has a long tail (now and
then a run lands 0.02-0.10 bpb worse), a 14-run calibration sees one such run or none, and sizing
the gains in its sigma (0.0046, against the judge's 0.0083 over 37 df) made "3 sigma" gains 1.7 of
the sigma the judge tests with (the full bench of 2026-12-02, docs/judge.md).

The runs use AUTORESEARCH_STEPS (a fixed number of steps): what a run learns then depends on its
seed only, not on the machine's load, so the bench's figures do not move with what else the box
runs (its wall time does). Prints one table (keep rates, runs and device-seconds per decision, the
noise the judge used) and writes <out>/bench_judge.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.judges.advance import DEFAULT_RULE, RULES  # noqa: E402
from agent.proposers.scripted import Edit, ScriptedProposer  # noqa: E402
from scripts import bench_load  # noqa: E402
from scripts.bench_edits import GAIN_RENAMES, NULL_EDITS, preflight, rename  # noqa: E402
from harness.job import FIXED_SOURCES  # noqa: E402
from search import knobs  # noqa: E402
from harness.experiment_record import ExperimentRecord  # noqa: E402

CALIBRATION = REPO / "scripts" / "bench_judge_calibration.json"
PROFILE = "tiny"               # seconds per run on 2 cores; the cpu profile is minutes
STEPS = 16                     # optimizer steps per run: ~10 s of training on 2 loaded cores
HANDICAP = ("LOGIT_SOFTCAP", 3.0)   # the baseline's bad knob (train.py has 15.0)
# Calibration: the knob's values (handicap + these) and seeds per value. The range must reach a
# 5 sigma gain in the judge's sigma (~0.04 bpb at 16 steps: LOGIT_SOFTCAP ~3.45-3.5).
# Under a changing load on a wall clock (--load) the judge's sigma reaches ~0.023, so the range goes
# on to 5.0 (a stored calibration without a value gets only that value's runs added).
CAL_OFFSETS = (0.0, 0.2, 0.4, 0.7, 1.0, 1.5, 2.0)
CAL_SEEDS = {0.0: 4, 0.2: 3, 0.4: 3, 0.7: 3, 1.0: 3, 1.5: 3, 2.0: 3}
CAL_SEED_BASE = 5000           # its own runs, outside any loop (a loop draws its seeds with a key: agent/seeds.py)
QUICK = {"nulls": 20, "gains": {3: 5, 5: 5}}
FULL = {"nulls": 24, "gains": {1: 3, 2: 3, 3: 5, 5: 5}}
# The goal: at most 1 null kept in 20, at least 9 in 10 gains of 3 sigma or more.
GOAL_NULL_RATE = 1 / 20
GOAL_GAIN_RATE = 9 / 10


# ---- calibration -------------------------------------------------------------------------------
def _train(repo: Path, env: dict, source: str, seed: int) -> float:
    path = repo / "cal_train.py"
    path.write_text(source)
    proc = subprocess.run([sys.executable, "cal_train.py"], cwd=repo, capture_output=True, text=True,
                          env=dict(env, AUTORESEARCH_SEED=str(seed)), timeout=1200)
    m = re.search(r"^val_bpb:\s+([0-9.]+)", proc.stdout, re.M)
    if proc.returncode or not m:
        raise SystemExit(f"calibration run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return float(m.group(1))


def _key(env: dict, base_source: str) -> dict:
    out = subprocess.run([sys.executable, "-c", "import prepare, json; print(json.dumps(prepare.describe()))"],
                         cwd=REPO, capture_output=True, text=True, env=env, check=True).stdout
    return {"profile": PROFILE, "steps": env["AUTORESEARCH_STEPS"], "fingerprint": json.loads(out)["fingerprint"],
            "knob": HANDICAP[0], "handicap": HANDICAP[1], "code": knobs.code_fingerprint(base_source)}


def calibrate(repo: Path, env: dict, base_source: str, force: bool, loose: bool = False) -> dict:
    key = _key(env, base_source)
    name, x0 = HANDICAP
    levels, t0 = {}, time.time()
    if CALIBRATION.exists() and not force:
        stored = json.loads(CALIBRATION.read_text())
        if stored.get("key") == key or loose and dict(stored.get("key"), code=key["code"]) == key:
            print(f"calibration: {CALIBRATION.relative_to(REPO)} (measured {stored['measured_at']})", flush=True)
            if all(str(round(x0 + d, 6)) in stored["levels"] for d in CAL_OFFSETS):
                return stored
            levels = dict(stored["levels"])   # the values CAL_OFFSETS gained since: only their runs
    todo = [d for d in CAL_OFFSETS if str(round(x0 + d, 6)) not in levels]
    print(f"calibration: {name} at {[x0 + d for d in todo]}, {sum(CAL_SEEDS[d] for d in todo)} direct runs",
          flush=True)
    for d in todo:
        x = round(x0 + d, 6)
        src = knobs.set_knobs(base_source, {name: x})
        levels[str(x)] = [_train(repo, env, src, CAL_SEED_BASE + 100 * i + j) for j in range(CAL_SEEDS[d])
                          for i in [CAL_OFFSETS.index(d)]]
        print(f"  {name} {x}: {levels[str(x)]}", flush=True)
    (repo / "cal_train.py").unlink(missing_ok=True)
    out = {"key": key, "levels": levels, "measured_at": time.strftime("%Y-%m-%d %H:%M"),
           "seconds": round(time.time() - t0, 1)}
    CALIBRATION.write_text(json.dumps(out, indent=1) + "\n")
    return out


class Curve:
    """The gain curve of the calibration: g(x) = -b ln(x / handicap), b the least-squares slope of
    val_bpb on ln(x) (a narrow range: a line is all three seeds a value can resolve), and the
    calibration's own sigma, pooled over the knob's values as agent/judges/stats.py pools (a run
    far from its value's others left out): printed beside the judge's, not the gains' unit."""

    def __init__(self, cal: dict):
        from agent.judges import stats
        groups = {float(x): vs for x, vs in cal["levels"].items()}
        noise = stats.pooled_noise({str(x): vs for x, vs in groups.items()})
        self.outliers = [(float(x), v) for x, v in noise.outliers]
        pts = [(x, v) for x, vs in groups.items() for v in vs if (x, v) not in self.outliers]
        self.x0 = HANDICAP[1]
        self.xmax = max(groups)
        self.sigma, self.df = noise.sigma, noise.df
        at = [v for x, v in pts if x == self.x0]
        self.sigma_at_handicap = statistics.stdev(at) if len(at) > 1 else None
        us, ys = [math.log(x / self.x0) for x, _ in pts], [v for _, v in pts]
        mu, my = statistics.fmean(us), statistics.fmean(ys)
        sxx = sum((u - mu) ** 2 for u in us)
        self.slope = sum((u - mu) * (y - my) for u, y in zip(us, ys)) / sxx
        resid = sum((y - my - self.slope * (u - mu)) ** 2 for u, y in zip(us, ys))
        self.slope_se = math.sqrt(resid / max(1, len(us) - 2) / sxx)

    def gain(self, x: float) -> float:
        return -self.slope * math.log(x / self.x0)

    def level_for(self, gain: float) -> float:
        if self.slope >= 0 or self.gain(self.xmax) < gain:
            raise SystemExit(f"the calibration reaches a gain of {self.gain(self.xmax):.4f}, not {gain:.4f}: "
                             "widen CAL_OFFSETS")
        return round(self.x0 * math.exp(gain / -self.slope), 4)


# ---- the loop ----------------------------------------------------------------------------------
def git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def make_repo(root: Path, base_source: str) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    for name in ("program.md", *FIXED_SOURCES):
        shutil.copy(REPO / name, repo / name)
    (repo / "train.py").write_text(base_source)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "program.md", *FIXED_SOURCES, "train.py")
    git(repo, "commit", "-q", "-m", f"bench base: {HANDICAP[0]} = {HANDICAP[1]}")
    return repo


def plan_nulls(cfg: dict, base: str | None = None) -> dict[int, Edit]:
    """Experiment number -> null edit (of the incumbent), from experiment 2 on: those the guard runs."""
    from agent.judges.guard import check_source
    ok = [e for e in NULL_EDITS if base is None or check_source(base, e[1](base)).ok]
    return {n: Edit("null", label, fn) for n, (label, fn) in enumerate(ok[:cfg["nulls"]], start=2)}


def plan_gains(cfg: dict, curve: Curve, unit: float, start: int, seed: int = 0) -> dict[int, Edit]:
    """Experiment number -> gain (of the base), from `start` on: sizes in sigmas of `unit` (bpb)."""
    import random
    edits: dict[int, Edit] = {}
    n = start
    gains = [k for k, count in sorted(cfg["gains"].items()) for _ in range(count)]
    random.Random(seed).shuffle(gains)
    name = HANDICAP[0]
    for i, k in enumerate(gains):
        x = curve.level_for(k * unit)
        renamed = rename(GAIN_RENAMES[i])
        edits[n] = Edit("gain", f"{name} {HANDICAP[1]:g} -> {x:g} (a {k:g} sigma gain; renames {GAIN_RENAMES[i]})",
                        lambda src, x=x, renamed=renamed: renamed(knobs.set_knobs(src, {name: x})), on_base=True, size=k)
        n += 1
    return edits


def judge_sigma(history) -> tuple[float | None, int | None]:
    """The sigma and df the judge's latest decision used (its evidence), None before any."""
    for r in reversed(history):
        ev = r.evidence_view() if r.is_experiment else None
        if ev is not None and ev.comparison.sigma is not None:
            return ev.comparison.sigma, ev.comparison.df
    return None, None


def run_loop(repo: Path, nulls: dict[int, Edit], base_source: str, budget: float,
             gains: Callable[[float], dict[int, Edit]], last: int, baseline_repeats: int | None = None,
             rule: str = "strict", confirm: bool = False):
    """The baseline, the null edits, then the gains `gains(sigma)` plans in the judge's sigma of
    that moment, judged by `rule`; with `confirm`, then every advanced edit's confirmation (its
    label: 2 fresh runs tested against its parent's, agent/validate.py confirm_run). Returns the
    records, the unit ({"sigma", "df"}) and the claims by experiment."""
    from agent import loop as loopmod
    from agent.console import Console
    from agent import gitops
    args = loopmod.parse_args(["--tag", "bench", "--repo", str(repo), "--proposer", "offline",
                               "--reviewer", "hierarchy", "--budget", f"{budget:g}", "--rule", rule,
                               "--final-runs", "0", "--max-experiments", str(last),
                               *(["--baseline-repeats", str(baseline_repeats)] if baseline_repeats else [])])
    loop = loopmod.Loop(args)
    loop.panel.console.close()
    loop.panel.console = Console(loop.tag, loop.budget, live=False)
    try:
        loop.setup()
        edits = dict(nulls)
        use_scripted(loop, ScriptedProposer(edits, base_source))
        loop.ensure_baseline()
        base = loop.last_kept
        base_best = dict(loop.best)
        for n in sorted(nulls):
            loop.experiment(loop.next_attempt(n))
            scripted_or_stop(loop.history)
        sigma, df = judge_sigma(loop.history)
        if sigma is None:
            raise SystemExit("bench: the judge has no noise estimate after the null edits")
        unit = {"sigma": sigma, "df": df}
        planned = gains(sigma)
        preflight({**nulls, **planned}, base_source)
        edits.update(planned)   # the scripted proposer reads this dict
        print(f"bench: {len(planned)} gains in the judge's sigma {sigma:.5f} ({df} df)", flush=True)
        for n in sorted(planned):
            if loop.last_kept != base:   # a kept gain: back to the baseline
                gitops.reset_hard(loop.worktree, base)
                loop.coord.moved(base, dict(base_best))
            loop.experiment(loop.next_attempt(n))
            scripted_or_stop(loop.history)
    finally:
        loop.stop()
    records = [r.to_dict() for r in loop.history if r.is_experiment]   # the journal objects, for the table
    claims = {}
    if confirm:
        from agent.validate import confirm_run
        for r in records[1:]:
            if r["status"] == "keep":
                claims[r["n"]] = confirm_run(loop.run_dir, r["n"], say=lambda line: print(line, flush=True))
    return records, unit, claims


def scripted_or_stop(history) -> None:
    """Stop at the first experiment the scripted proposer did not propose: the table would
    describe edits that never ran (checked after each one, so no night is spent to learn it)."""
    recs = [r for r in history if r.is_experiment][1:]
    if recs and recs[-1].proposer != "scripted":
        raise SystemExit(f"bench: experiment {recs[-1].n} was proposed by {recs[-1].proposer!r}, "
                         "not the scripted proposer")


def use_scripted(loop, scripted: ScriptedProposer) -> None:
    """The loop asks `scripted` for every proposal, and falls back to nobody else."""
    loop.ideas.proposers = replace(loop.ideas.proposers, proposer=scripted, offline=scripted)


def runs_of(rec: dict) -> int:
    """Training runs a decision took (its evidence: the candidate's runs and the incumbent's made for it)."""
    ev = ExperimentRecord.from_dict(rec).evidence_view()
    return ev.runs_spent if ev else 0


# ---- the table ---------------------------------------------------------------------------------
def summarize(records: list[dict], edits: dict[int, Edit], curve: Curve, unit: dict, wall: float,
              claims: dict | None = None) -> dict:
    """The table; with `claims` (experiment -> its confirmation), the labels: how many of each group
    were confirmed (a keep is "advanced"; only a confirmed one is a claim)."""
    claims = claims or {}
    by_n = {r["n"]: r for r in records}
    base = by_n.get(1, {})
    rows = []
    for n, e in sorted(edits.items()):
        r = by_n.get(n)
        if r is None:
            continue
        ev = r.get("evidence") or {}
        runs = (ev.get("candidate") or {}).get("runs") or []
        cmp = ev.get("comparison") or {}
        rows.append({"n": n, "kind": e.kind, "size": e.size, "label": e.label, "status": r["status"],
                     "runs": len(runs), "seconds": (r.get("timings") or {}).get("total", 0.0),
                     "reason": r.get("decision_reason"), "p_better": cmp.get("p_better"),
                     "gain_measured": cmp.get("gain"), "sigma": cmp.get("sigma"), "df": cmp.get("df"),
                     "confirmed": bool(claims.get(n, {}).get("confirmed"))})
    groups = [("null edits", lambda x: x["kind"] == "null")]
    for k in sorted({e.size for e in edits.values() if e.kind == "gain"}):
        groups.append((f"gains of {k:g} sigma", lambda x, k=k: x["kind"] == "gain" and x["size"] == k))
    groups.append(("gains >= 3 sigma", lambda x: x["kind"] == "gain" and x["size"] >= 3))
    table = []
    for name, pick in groups:
        sel = [x for x in rows if pick(x)]
        if not sel:
            continue
        kept = sum(x["status"] == "keep" for x in sel)
        measured = [x["gain_measured"] for x in sel if isinstance(x["gain_measured"], (int, float))]
        sizes = {x["size"] for x in sel}
        table.append({"what": name, "trials": len(sel), "kept": kept, "rate": kept / len(sel),
                      "confirmed": sum(x["confirmed"] for x in sel),
                      "runs_per_decision": statistics.fmean(x["runs"] for x in sel),
                      "seconds_per_decision": statistics.fmean(x["seconds"] for x in sel),
                      "refused": sum(1 for x in sel if x["runs"] == 0),
                      "planned_gain": (sizes.pop() * unit["sigma"]) if sel[0]["kind"] == "gain" and len(sizes) == 1
                      else (0.0 if sel[0]["kind"] == "null" else None),
                      "measured_gain": statistics.fmean(measured) if measured else None})
    nulls = next(t for t in table if t["what"] == "null edits")
    big = next((t for t in table if t["what"] == "gains >= 3 sigma"), None)
    bev = base.get("evidence") or {}
    last = next((x for x in reversed(rows) if x.get("sigma") is not None), {})
    return {"table": table, "rows": rows, "wall_seconds": wall,
            "baseline": {"val_bpb": base.get("trusted_bpb"), "runs": len((bev.get("candidate") or {}).get("runs") or []),
                         "band": (base.get("verdicts") or {}).get("judge", {}).get("band"),
                         "seconds": (base.get("timings") or {}).get("total")},
            "noise_at_end": {"sigma": last.get("sigma"), "df": last.get("df")}, "unit": unit,
            "calibration": {"sigma": curve.sigma, "df": curve.df, "sigma_at_handicap": curve.sigma_at_handicap,
                            "outliers": curve.outliers, "slope": curve.slope, "slope_se": curve.slope_se},
            "labels": bool(claims),
            # the goal: nulls that count as a claim (kept; with labels, confirmed) at most 1 in 20, and
            # gains of 3 sigma or more advanced at least 9 in 10
            "goal": {"nulls": (nulls["confirmed"] if claims else nulls["kept"]) <= GOAL_NULL_RATE * nulls["trials"] + 1e-9,
                     "gains": big is not None and big["kept"] >= GOAL_GAIN_RATE * big["trials"] - 1e-9}}


def render(s: dict) -> str:
    labels = s.get("labels")
    out = [f"{'':22s}{'trials':>7s}{'kept':>6s}{'rate':>7s}" + (f"{'confirmed':>11s}" if labels else "")
           + f"{'runs/dec':>10s}{'dev-s/dec':>11s}{'planned gain':>14s}{'measured gain':>15s}"]
    for t in s["table"]:
        mg = f"{t['measured_gain']:.5f}" if t["measured_gain"] is not None else "-"
        pg = f"{t['planned_gain']:.5f}" if t["planned_gain"] is not None else "3-5 sigma"
        out.append(f"{t['what']:22s}{t['trials']:7d}{t['kept']:6d}{t['rate']:7.0%}"
                   + (f"{t['confirmed']:11d}" if labels else "")
                   + f"{t['runs_per_decision']:10.2f}{t['seconds_per_decision']:11.0f}{pg:>14s}{mg:>15s}"
                   + (f"  ({t['refused']} refused by the guard)" if t["refused"] else ""))
    b, c, e = s["baseline"], s["calibration"], s["noise_at_end"]
    band = b.get("band") or {}
    out.append(f"baseline: {b['runs']} runs, val_bpb {b['val_bpb']:.6f}, {b['seconds'] or 0:.0f} device-s; "
               f"the judge's sigma {band.get('spread') or 0:.5f} ({band.get('df')} df), a 2-run candidate had to gain "
               f"{band.get('threshold') or float('nan'):.5f}; at the end sigma {e['sigma'] or 0:.5f} ({e['df']} df)")
    u = s["unit"]
    out.append(f"the gains' unit: the judge's sigma after the null edits, {u['sigma']:.5f} ({u['df']} df); the gain "
               f"curve known to +-{100 * c['slope_se'] / abs(c['slope']):.0f}% (the calibration slope's standard error; "
               f"the calibration's own sigma {c['sigma']:.5f}, {c['df']} df, {len(c['outliers'])} far run(s) left out)")
    nulls = next(t for t in s["table"] if t["what"] == "null edits")
    big = next((t for t in s["table"] if t["what"] == "gains >= 3 sigma"), None)
    claimed = "confirmed" if labels else "kept"
    out.append(f"goal: nulls {claimed} {nulls['confirmed' if labels else 'kept']}/{nulls['trials']} "
               f"(at most {GOAL_NULL_RATE * nulls['trials']:g}; {nulls['kept']} advanced): "
               f"{'MET' if s['goal']['nulls'] else 'NOT MET'}; gains >= 3 sigma advanced "
               f"{big['kept'] if big else 0}/{big['trials'] if big else 0} (at least {GOAL_GAIN_RATE:.0%}): "
               f"{'MET' if s['goal']['gains'] else 'NOT MET'}")
    out.append(f"wall time {s['wall_seconds'] / 60:.1f} min; load average at the end {os.getloadavg()[0]:.2f}")
    return "\n".join(out)


def bench_base(steps: int, handicap: bool = True) -> tuple[dict, str]:
    """The benches' set-up, shared with bench_proposers.py: this process and its runs on PROFILE at
    `steps` fixed steps with no API key (a bench measures a rule or a search, not an LLM), the data
    prepared, and the base: the tag's base as the loop commits it on this profile
    (runtime.PROFILE_KNOBS), then HANDICAP unless `handicap` is False (the tuned base a new tag
    starts from). Returns (the runs' environment, the base's train.py)."""
    os.environ.update(AUTORESEARCH_PROFILE=PROFILE, AUTORESEARCH_STEPS=str(steps))
    os.environ.pop("ANTHROPIC_API_KEY", None)
    env = dict(os.environ)
    subprocess.run([sys.executable, "prepare.py"], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    profiled, _ = knobs.for_profile((REPO / "train.py").read_text(), PROFILE)
    return env, knobs.set_knobs(profiled, {HANDICAP[0]: HANDICAP[1]}) if handicap else profiled


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--quick", action="store_true", help="20 nulls and 10 gains of 3 and 5 sigma (the goal's set)")
    p.add_argument("--steps", type=int, default=STEPS, help="optimizer steps per run (AUTORESEARCH_STEPS)")
    p.add_argument("--calibrate", action="store_true", help="measure the gain curve again")
    p.add_argument("--calibrate-only", action="store_true", help="measure the gain curve again, then stop")
    p.add_argument("--nulls", type=int, default=None, help="null edits (default: 20 quick, 24 full)")
    p.add_argument("--gains", default=None, help="gains as SIGMA:COUNT,... (default 3:5,5:5 quick)")
    p.add_argument("--out", default=str(REPO / "out" / "bench_judge"))
    p.add_argument("--keep", action="store_true", help="keep the throwaway repository and print its path")
    p.add_argument("--baseline-repeats", type=int, help="the baseline's runs before the first decision")
    p.add_argument("--rule", choices=RULES, default=DEFAULT_RULE,
                   help="the keep rule judged (agent/judges/advance.py); for any but strict, every advanced edit "
                        "is then confirmed (2 fresh runs) and the nulls' goal counts the confirmed ones")
    bench_load.add_args(p)
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.nulls is not None:
        cfg["nulls"] = min(args.nulls, len(NULL_EDITS))
    if args.gains:
        cfg["gains"] = {float(k): int(c) for k, c in (part.split(":") for part in args.gains.split(","))}
    env, base_source = bench_base(args.steps)
    root = Path(tempfile.mkdtemp(prefix="bench-judge-"))
    t0 = time.time()
    try:
        repo = make_repo(root, base_source)
        curve = Curve(calibrate(repo, env, base_source, args.calibrate or args.calibrate_only, args.load))
        if args.calibrate_only:
            print(f"slope {curve.slope:.5f} +- {curve.slope_se:.5f} per ln({HANDICAP[0]}); reaches a gain of "
                  f"{curve.gain(curve.xmax):.4f}; sigma {curve.sigma:.5f} ({curve.df} df, outliers {curve.outliers})")
            return 0
        nulls = plan_nulls(cfg, base_source)
        start = max(nulls, default=1) + 1
        # the gains are planned once the judge has measured the noise (and refused then if the curve
        # cannot reach them); a dry plan within the curve's reach checks the edits against the guard now
        dry_unit = 0.9 * curve.gain(curve.xmax) / max(cfg["gains"], default=1)
        preflight({**nulls, **plan_gains(cfg, curve, dry_unit, start)}, base_source)
        print(f"bench: {len(nulls)} null edits, then {sum(cfg['gains'].values())} gains sized in the judge's sigma",
              flush=True)
        planned: dict[int, Edit] = {}

        def gains(sigma: float) -> dict[int, Edit]:
            planned.update(plan_gains(cfg, curve, sigma, start))
            return planned
        with bench_load.background(args) as load:
            records, unit, claims = run_loop(repo, nulls, base_source, args.budget if args.load else 60.0, gains,
                                             start + sum(cfg["gains"].values()) - 1, args.baseline_repeats,
                                             rule=args.rule, confirm=args.rule != "strict")
        s = summarize(records, {**nulls, **planned}, curve, unit, time.time() - t0, claims)
        s["rule"] = args.rule
        bench_load.report(s, records, {**nulls, **planned}, load)
        s.update(command=" ".join(["uv run scripts/bench_judge.py", *(argv if argv is not None else sys.argv[1:])]),
                 steps=args.steps, profile=PROFILE, handicap=list(HANDICAP))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_judge.json").write_text(json.dumps(s, indent=1, default=str) + "\n")
        print(render(s), flush=True)
        return 0 if s["goal"]["nulls"] and s["goal"]["gains"] else 1
    finally:
        if args.keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
