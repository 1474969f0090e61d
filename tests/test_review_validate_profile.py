"""--validate runs on the tag's profile, not the machine's default: from a shell without
AUTORESEARCH_PROFILE, validating a tiny-profile tag (the smoke preset's) prepared the cpu
profile's data and measured its commits at the cpu profile's shapes, figures of another setting."""
import json
import os

import pytest

from agent import validate
from runfiles.journal import Measurement
from runfiles.run import RunInfo
from tests.test_validate import TRICK, _run


def test_validation_runs_on_the_tags_profile(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    repo, run = _run(tmp_path, monkeypatch, TRICK)
    profile = RunInfo.read(run / "run.json").profile
    assert profile
    seen = []

    def probe(t, scratch, budget):
        def measure(commit, n, seed):
            seen.append(os.environ.get("AUTORESEARCH_PROFILE"))
            return Measurement(True, "probe", 1.0, None)
        measure.close = lambda: None
        return measure
    monkeypatch.delenv("AUTORESEARCH_PROFILE", raising=False)
    validate.validate(run, 2, seeds=1, make_measure=probe)
    assert seen == [profile, profile]
    assert "AUTORESEARCH_PROFILE" not in os.environ, "the process's environment is left as it was"
    other = "gpu" if profile != "gpu" else "cpu"
    monkeypatch.setenv("AUTORESEARCH_PROFILE", other)
    with pytest.raises(validate.ValidateError, match="profile"):
        validate.validate(run, 2, seeds=1, make_measure=probe)


def test_a_smoke_tag_is_validated_at_k_times_its_steps(tmp_path, monkeypatch):
    """A --smoke tag trained 30 steps a run whatever its nominal budget: validated from a plain
    shell it ran on the wall-clock budget instead (another setting: a bigger model that cost
    nothing in steps trained fewer of them), and its gain 'reversed'."""
    monkeypatch.delenv("AUTORESEARCH_STEPS", raising=False)
    repo, run = _run(tmp_path, monkeypatch, TRICK)
    info = json.loads((run / "run.json").read_text())
    info["settings"] = dict(info.get("settings") or {}, smoke=True)
    (run / "run.json").write_text(json.dumps(info))
    steps = validate.terms(run)["steps"]
    assert steps, "the base record's summary gives the steps it ran"
    seen = []

    def probe(t, scratch, budget):
        def measure(commit, n, seed):
            seen.append(os.environ.get("AUTORESEARCH_STEPS"))
            return Measurement(True, "probe", 1.0, None)
        measure.close = lambda: None
        return measure
    monkeypatch.delenv("AUTORESEARCH_THREADS", raising=False)
    out = validate.validate(run, 3, seeds=1, make_measure=probe)
    assert seen == [str(3 * steps)] * 2 and out["steps"] == 3 * steps
    assert "AUTORESEARCH_STEPS" not in os.environ and "AUTORESEARCH_THREADS" not in os.environ


def test_the_report_line_of_a_steps_validation_names_its_steps(tmp_path):
    from runfiles.shared_results import VALIDATION_JSON, Validation
    side = {"commit": "a" * 40, "runs": [1.0], "failed": []}
    (tmp_path / "report").mkdir()
    doc = {"k": 2, "budget": 20.0, "seeds": [1], "final": side, "base": side, "gain_short": 0.01,
           "gain_long": 0.01, "se_long": None, "verdict": "holds", "reason": "r"}
    (tmp_path / VALIDATION_JSON).write_text(json.dumps(dict(doc, steps=60)))
    assert "(60 steps, 1 seed(s) a side)" in Validation.read(tmp_path).line()
    (tmp_path / VALIDATION_JSON).write_text(json.dumps(doc))
    assert "(20 s, 1 seed(s) a side)" in Validation.read(tmp_path).line()
