"""The LLM judge through the real anthropic client against the local Messages API server."""
import subprocess
from types import SimpleNamespace

from agent.judges.hierarchy import JudgeHierarchy
from agent.judges.judge import rule_opinion
from agent.judges.llm_judge import VERDICT_TOOL, LLMJudge
from tests.test_judge import margin
from tests.fake_anthropic import FakeAnthropic, fake_anthropic  # noqa: F401  (fixture)
from harness.experiment_record import ExperimentRecord

DIFF = "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-MATRIX_LR = 0.02\n+MATRIX_LR = 0.03\n"
FIGS = {"best_before": 1.0, "threshold": 0.005, "runs": [0.99], "improvement": 0.01}


def judge(fake, **kw):
    return LLMJudge("claude-sonnet-5", api_key="sk-ant-test-not-a-real-key", base_url=fake.base_url,
                    max_retries=1, **kw)


def review(j):
    rule = rule_opinion(trusted_bpb=0.99, best_bpb=1.0, band=margin([1.0, 1.002]), lines={"net": 0})
    return j.review(diff=DIFF, hypothesis="higher LR trains faster", description="MATRIX_LR 0.03",
                    figures=FIGS, rule=rule, history=[ExperimentRecord.of(n=1, status="keep", trusted_bpb=1.0,
                                                                       description="baseline")])


def test_verdict_is_a_forced_tool_call_and_is_parsed(fake_anthropic):
    fake_anthropic.push(FakeAnthropic.tool_use("record_verdict", {
        "status": "keep", "confidence": 0.8, "rationale": "A clear gain from a one-line change.",
        "concerns": []}, usage={"input_tokens": 1200, "output_tokens": 60}))
    res = review(judge(fake_anthropic))
    assert res.error is None
    assert res.opinion.status == "keep" and res.opinion.confidence == 0.8 and res.opinion.judge == "llm"
    assert res.tokens["input"] == 1200 and res.tokens["output"] == 60 and res.cost_usd > 0
    body = fake_anthropic.message_requests()[0].body
    assert body["tool_choice"] == {"type": "tool", "name": "record_verdict"}
    assert body["tools"][0]["name"] == VERDICT_TOOL["name"]
    text = body["messages"][0]["content"]
    assert "MATRIX_LR = 0.03" in text and "higher LR" in text and "Rule judge says: keep" in text


def test_malformed_and_failed_replies_leave_the_rule_judge_alone(fake_anthropic):
    fake_anthropic.push(FakeAnthropic.tool_use("record_verdict", {"status": "maybe", "confidence": 2,
                                                                 "rationale": "?"}))
    res = review(judge(fake_anthropic))
    assert res.opinion is None and "malformed verdict" in res.error and "maybe" in res.error
    fake_anthropic.push(FakeAnthropic.text("I think keep."))
    res = review(judge(fake_anthropic))
    assert res.opinion is None and "no record_verdict" in res.error
    # a persistent server error: the SDK retries (for real), then we report, not raise
    fake_anthropic.push(FakeAnthropic.error(500), FakeAnthropic.error(500), FakeAnthropic.error(500))
    res = review(judge(fake_anthropic))
    assert res.opinion is None and "InternalServerError" in res.error
    assert len(fake_anthropic.message_requests()) == 4   # 1 + 1 + (1 try + 1 SDK retry)


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_llm_veto_turns_a_rule_keep_into_an_escalated_contested_discard(fake_anthropic, tmp_path, monkeypatch):
    """Both opinions and the reason reach the decision, the git note and the queue."""
    monkeypatch.setenv("GIT_AUTHOR_NAME", "t"); monkeypatch.setenv("GIT_AUTHOR_EMAIL", "t@t")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "t"); monkeypatch.setenv("GIT_COMMITTER_EMAIL", "t@t")
    _git(tmp_path, "init", "-q")
    (tmp_path / "train.py").write_text("MATRIX_LR = 0.03\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "exp")
    commit = _git(tmp_path, "rev-parse", "HEAD").strip()
    planted = "sk-ant-api03-PLANTED-never-written"
    monkeypatch.setenv("ANTHROPIC_API_KEY", planted)
    fake_anthropic.push(FakeAnthropic.tool_use("record_verdict", {
        "status": "discard", "confidence": 0.9, "rationale": f"The gain is implausible for this change. {planted}",
        "concerns": ["check the evaluation"]}))
    h = JudgeHierarchy(llm_judge=judge(fake_anthropic))
    from agent.judges.evidence import Sample
    h._memo.runs["b" * 40] = [Sample("b" * 40, v) for v in (0.999, 1.001, 1.0, 1.002, 0.998)]   # the bar, the noise
    ctx = SimpleNamespace(n=2, tag="t", worktree=tmp_path, run_dir=tmp_path, commit=commit, parent=commit,
                          diff=DIFF, history=[], best={"commit": "b" * 40, "val_bpb": 1.0},
                          proposal=SimpleNamespace(description="LR 0.03", hypothesis=f"faster {planted}"))
    from harness.verify import VerifyResult
    # a rule keep rests on two runs: the first asks for its confirmation, the LLM is asked after
    assert h._experiment(ctx, VerifyResult(True, "verified", 0.98, 0.98, True, 1.0), [0.98]).is_again
    d = h._experiment(ctx, VerifyResult(True, "verified", 0.981, 0.981, True, 1.0), [0.98, 0.981])
    assert d.status == "discard" and d.reason.startswith("contested:") and "LLM judge says discard" in d.reason
    jd = d.verdicts["judge"]
    assert jd["rule"]["status"] == "keep" and jd["llm"]["status"] == "discard" and jd["basis"] == "llm_veto"
    assert jd["escalations"][0]["kind"] == "disagreement"
    from runfiles.queue_store import QueueStore
    item = QueueStore(tmp_path / "queue.sqlite").get(jd["escalations"][0]["id"])
    assert item.escalation.rule.status == "keep" and item.escalation.llm.status == "discard"
    assert item.escalation.diff == DIFF and item.escalation.discarded_ref == "refs/autoresearch/t/discarded/2"
    note = _git(tmp_path, "notes", "--ref", "refs/notes/autoresearch-judge", "show", commit)
    assert "implausible" in note and '"status": "discard"' in note
    # a key that leaked into the model's reply or the hypothesis is scrubbed from note and queue
    assert planted not in note and planted not in str(item) and "[redacted]" in note
    assert planted not in (tmp_path / "queue.sqlite").read_bytes().decode(errors="replace")
