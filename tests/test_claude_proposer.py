"""The Claude proposer end to end: real `anthropic` client, local Messages API server."""

import json

import pytest

from agent.proposers.base import Proposal, ProposalError, ProposalRequest, ProposerUnavailable
from agent.proposers.claude import ClaudeProposer, _retry_after
from agent.tracing import Tracer
from tests.fake_anthropic import FakeAnthropic, fake_anthropic  # noqa: F401  (fixture)
from harness.experiment_record import ExperimentRecord

F = FakeAnthropic
API_KEY = "sk-ant-test-0123456789abcdef"
TRAIN = """\
DEPTH = 4  # transformer layers
MATRIX_LR = 0.02  # Muon learning rate


def main():
    print("training", DEPTH, MATRIX_LR)


if __name__ == "__main__":
    main()
"""
PREPARE = "MAX_SEQ_LEN = 2048  # fixed\n"
HISTORY = [{"n": 0, "status": "keep", "description": "baseline", "commit": "a" * 40, "short": "aaaaaaa",
            "summary": {"val_bpb": 1.2345, "peak_vram_mb": 2048.0}, "decision_reason": "baseline"},
           {"n": 1, "status": "discard", "description": "depth 2", "hypothesis": "smaller is faster",
            "summary": {"val_bpb": 1.3}, "decision_reason": "worse than best", "diff": "-DEPTH = 4\n+DEPTH = 2"}]
EDIT = {"path": "train.py", "old_str": "DEPTH = 4  #", "new_str": "DEPTH = 6  #"}
SUBMIT = {"description": "depth 6", "hypothesis": "more layers use the budget better"}


@pytest.fixture
def worktree(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "prepare.py").write_text(PREPARE)
    (tmp_path / "README.md").write_text("# readme\n")
    return tmp_path


def request(worktree, **kw):
    args = dict(n=2, worktree=worktree, train_source=TRAIN, program="Goal: lowest val_bpb. PROGRAM-MARKER",
                history=HISTORY, best={"commit": "a" * 40, "val_bpb": 1.2345})
    args.update(kw)
    args["history"] = [ExperimentRecord.from_dict(h) for h in args["history"]]   # as the loop holds them
    return ProposalRequest(**args)


def proposer(fake, **kw):
    args = dict(model="claude-sonnet-4-6", api_key=API_KEY, base_url=fake.base_url, sdk_max_retries=0,
                backoff_base=0.01, timeout=5.0)
    args.update(kw)
    return ClaudeProposer(**args)


def test_scripted_session_edits_train_py_and_sums_usage(fake_anthropic, worktree):
    fake_anthropic.push(
        F.tool_use("read_file", {"path": "train.py"},
                   usage={"input_tokens": 1000, "output_tokens": 50, "cache_creation_input_tokens": 800}),
        F.tool_use("str_replace", EDIT, usage={"input_tokens": 200, "output_tokens": 60,
                                               "cache_read_input_tokens": 800}),
        F.tool_use("submit", SUBMIT, usage={"input_tokens": 300, "output_tokens": 40,
                                            "cache_read_input_tokens": 1000}),
    )
    tracer = Tracer(worktree / "traces.jsonl")
    prop = proposer(fake_anthropic, tracer=tracer).propose(request(worktree))

    assert isinstance(prop, Proposal)
    assert prop.source == TRAIN.replace("DEPTH = 4  #", "DEPTH = 6  #")
    assert (prop.description, prop.hypothesis) == (SUBMIT["description"], SUBMIT["hypothesis"])
    assert (prop.proposer, prop.model) == ("claude", "claude-sonnet-4-6")
    assert prop.tokens == {"input": 1500, "output": 150, "cache_read": 1800, "cache_write": 800}
    # Sonnet 4.6 list prices per MTok: input 3, output 15, 5-minute cache write 3.75, cache read 0.30.
    assert prop.cost_usd == pytest.approx((1500 * 3 + 150 * 15 + 800 * 3.75 + 1800 * 0.30) / 1e6)
    assert (worktree / "train.py").read_text() == TRAIN          # edits never touch the disk

    reqs = fake_anthropic.message_requests()
    assert len(reqs) == 3 and fake_anthropic.pending == 0
    first = reqs[0].body
    assert reqs[0].api_key() == API_KEY
    assert first["model"] == "claude-sonnet-4-6"
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "PROGRAM-MARKER" in first["system"][0]["text"]
    assert [t["name"] for t in first["tools"]] == ["read_file", "read_history", "search_archive", "suggest_knobs",
                                                 "str_replace", "write_file", "submit"]
    opening = first["messages"][0]["content"][0]["text"]
    assert "Experiment 2." in opening and "depth 2" in opening and "worse than best" in opening
    assert TRAIN in opening
    # The stable prefix is byte-identical across turns (or the cache would never hit).
    assert all(r.body["system"] == first["system"] and r.body["tools"] == first["tools"] for r in reqs)
    read_result = reqs[1].tool_results()
    assert len(read_result) == 1 and read_result[0]["content"] == TRAIN and not read_result[0].get("is_error")
    assert reqs[1].last_user_content()[-1]["cache_control"] == {"type": "ephemeral"}
    assert "edited" in reqs[2].tool_results()[0]["content"]

    spans = [json.loads(line) for line in (worktree / "traces.jsonl").read_text().splitlines()]
    calls = [s for s in spans if s["name"] == "claude.messages"]
    assert len(calls) == 3 and sum(s["tokens"]["input"] for s in calls) == 1500
    assert [s["name"] for s in spans if s["name"].startswith("tool.")] == ["tool.read_file", "tool.str_replace",
                                                                          "tool.submit"]
    assert API_KEY not in (worktree / "traces.jsonl").read_text()


@pytest.mark.parametrize("sdk_retries", [0, 2])
def test_429_then_529_then_success(fake_anthropic, worktree, sdk_retries):
    fake_anthropic.push(
        F.error(429, "slow down", retry_after_ms=10),
        F.error(529, "overloaded", retry_after_ms=10),
        F.tool_uses([("str_replace", EDIT), ("submit", SUBMIT)]),   # two tools in one turn
    )
    prop = proposer(fake_anthropic, sdk_max_retries=sdk_retries).propose(request(worktree))
    reqs = fake_anthropic.message_requests()
    assert [r.reply_status for r in reqs] == [429, 529, 200]
    assert reqs[0].body == reqs[1].body == reqs[2].body               # the same request, retried
    assert "DEPTH = 6" in prop.source
    assert f"{2 if sdk_retries == 0 else 0} retried failures" in prop.notes


def test_timeout_is_retried(fake_anthropic, worktree):
    fake_anthropic.push(F.message([], delay=1.5),                     # answers after the client gave up
                        F.tool_uses([("str_replace", EDIT), ("submit", SUBMIT)]))
    prop = proposer(fake_anthropic, timeout=0.3).propose(request(worktree))
    assert "DEPTH = 6" in prop.source
    assert len(fake_anthropic.message_requests()) == 2
    assert "1 retried failures" in prop.notes


def test_malformed_tool_input_is_reported_and_model_recovers(fake_anthropic, worktree):
    fake_anthropic.push(
        F.tool_use("str_replace", {"path": "train.py", "old": "DEPTH"}),          # wrong field names
        F.tool_uses([("str_replace", ["not", "an", "object"]),                     # not an object
                     ("str_replace", {"path": "train.py", "old_str": "NOT THERE", "new_str": "x"}),
                     ("frobnicate", {})]),                                         # unknown tool
        F.tool_use("str_replace", EDIT),
        F.tool_use("submit", SUBMIT),
    )
    prop = proposer(fake_anthropic).propose(request(worktree))
    reqs = fake_anthropic.message_requests()
    bad = reqs[1].tool_results()
    assert bad[0]["is_error"] is True and "missing ['old_str', 'new_str']" in bad[0]["content"]
    assert "unexpected ['old']" in bad[0]["content"]
    three = reqs[2].tool_results()
    assert [r["is_error"] for r in three] == [True, True, True]
    assert "JSON object" in three[0]["content"]
    assert "occurs 0 times" in three[1]["content"]
    assert "Unknown tool 'frobnicate'" in three[2]["content"]
    assert not reqs[3].tool_results()[0].get("is_error")
    assert prop.source == TRAIN.replace("DEPTH = 4  #", "DEPTH = 6  #")


def test_editing_prepare_py_is_refused_and_reported(fake_anthropic, worktree):
    fake_anthropic.push(
        F.tool_use("str_replace", {"path": "prepare.py", "old_str": "2048", "new_str": "4096"}),
        F.tool_use("write_file", {"path": "./../prepare.py", "content": "MAX_SEQ_LEN = 1\n"}),
        F.tool_use("str_replace", EDIT),
        F.tool_use("submit", SUBMIT),
    )
    prop = proposer(fake_anthropic).propose(request(worktree))
    reqs = fake_anthropic.message_requests()
    for r in reqs[1:3]:
        (res,) = r.tool_results()
        assert res["is_error"] is True and res["content"].startswith("Refused")
    assert (worktree / "prepare.py").read_text() == PREPARE
    assert "4096" not in prop.source and "MAX_SEQ_LEN" not in prop.source
    assert "DEPTH = 6" in prop.source


def test_outage_longer_than_patience_raises_unavailable(fake_anthropic, worktree):
    fake_anthropic.default = F.error(529, "overloaded", retry_after_ms=50)
    p = proposer(fake_anthropic, api_patience=1.0, sdk_max_retries=1)
    with pytest.raises(ProposerUnavailable, match="down for"):
        p.propose(request(worktree))
    assert len(fake_anthropic.message_requests()) >= 4
    assert all(r.reply_status == 529 for r in fake_anthropic.message_requests())


def test_bad_key_is_unavailable_and_bad_request_is_an_error(fake_anthropic, worktree):
    fake_anthropic.push(F.error(401, "invalid x-api-key"))
    with pytest.raises(ProposerUnavailable, match="401"):
        proposer(fake_anthropic).propose(request(worktree))
    fake_anthropic.push(F.error(400, "prompt is too long"))
    with pytest.raises(ProposalError, match="prompt is too long"):
        proposer(fake_anthropic).propose(request(worktree))
    assert len(fake_anthropic.message_requests()) == 2                # neither was retried


def test_tool_call_limit_raises_proposal_error(fake_anthropic, worktree):
    fake_anthropic.default = lambda req: F.tool_use("read_file", {"path": "README.md"})
    with pytest.raises(ProposalError, match="no submit after 5 tool calls"):
        proposer(fake_anthropic, max_tool_calls=5).propose(request(worktree))
    assert len(fake_anthropic.message_requests()) == 5


def test_talking_without_tools_gives_up(fake_anthropic, worktree):
    fake_anthropic.default = F.text("I think we should increase the depth.")
    with pytest.raises(ProposalError, match="without calling submit"):
        proposer(fake_anthropic).propose(request(worktree))
    reqs = fake_anthropic.message_requests()
    assert len(reqs) == 4
    assert "call submit" in reqs[1].last_user_content()[0]["text"]


def test_unchanged_submit_rejected_then_history_tool(fake_anthropic, worktree):
    fake_anthropic.push(
        F.tool_use("submit", SUBMIT),
        F.tool_uses([("read_history", {}), ("read_history", {"experiment": 1}), ("read_file", {"path": "/etc/passwd"})]),
        F.tool_use("write_file", {"path": "train.py", "content": TRAIN.replace("0.02", "0.03")}),
        F.tool_use("submit", SUBMIT),
    )
    prop = proposer(fake_anthropic).propose(request(worktree))
    reqs = fake_anthropic.message_requests()
    (unchanged,) = reqs[1].tool_results()
    assert unchanged["is_error"] is True and "unchanged" in unchanged["content"]
    summary, detail, passwd = reqs[2].tool_results()
    assert "#1 discard" in summary["content"] and "worse than best" in summary["content"]
    assert "+DEPTH = 2" in detail["content"]
    assert passwd["is_error"] is True and "not readable" in passwd["content"]
    assert "MATRIX_LR = 0.03" in prop.source


def test_fix_of_starts_from_crashed_source_with_log(fake_anthropic, worktree):
    crashed = TRAIN.replace("DEPTH = 4  #", "DEPTH = 'four'  #")
    fix_of = Proposal("depth four", "typo", crashed, "claude", "claude-sonnet-4-6")
    fake_anthropic.push(
        F.tool_use("submit", SUBMIT),                                          # resubmitting the crash
        F.tool_use("str_replace", {"path": "train.py", "old_str": "'four'", "new_str": "6"}),
        F.tool_use("submit", SUBMIT),
    )
    req = request(worktree, fix_of=fix_of, feedback="Traceback: TypeError: can't multiply str")
    prop = proposer(fake_anthropic).propose(req)
    reqs = fake_anthropic.message_requests()
    opening = reqs[0].body["messages"][0]["content"][0]["text"]
    assert "Traceback: TypeError" in opening and crashed in opening and "crashed" in opening
    assert "still the version that crashed" in reqs[1].tool_results()[0]["content"]
    assert prop.source == TRAIN.replace("DEPTH = 4  #", "DEPTH = 6  #")


def test_guard_feedback_goes_into_first_message(fake_anthropic, worktree):
    fake_anthropic.push(F.tool_uses([("str_replace", EDIT), ("submit", SUBMIT)]))
    proposer(fake_anthropic).propose(request(worktree, feedback="guard: rebinding TIME_BUDGET is not allowed"))
    opening = fake_anthropic.message_requests()[0].body["messages"][0]["content"][0]["text"]
    assert "rebinding TIME_BUDGET is not allowed" in opening


def test_missing_key_is_unavailable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProposerUnavailable, match="ANTHROPIC_API_KEY"):
        ClaudeProposer()


def test_retry_after_parsing():
    class R:
        def __init__(self, h):
            self.headers = h
    assert _retry_after(R({"retry-after-ms": "250"})) == pytest.approx(0.25)
    assert _retry_after(R({"retry-after": "3"})) == 3.0
    assert _retry_after(R({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) is None
    assert _retry_after(None) is None


def test_pricing_prefixes_and_cache_ttls():
    from llm import pricing
    assert pricing.price_for("claude-opus-4-1-20250805").input == 15.0      # not claude-opus-4's row by luck
    assert pricing.price_for("claude-opus-4-6").input == 5.0
    assert pricing.price_for("claude-sonnet-4-5-20250929").output == 15.0
    assert pricing.price_for("claude-sonnet-99").input == pricing.PRICES["claude-sonnet-5"].input  # family fallback: newest sonnet
    assert pricing.price_for("gpt-4o") is None and pricing.cost_usd("gpt-4o", {"input": 10**6}) == 0.0
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 3000,
             "cache_read_input_tokens": 0, "cache_creation": {"ephemeral_1h_input_tokens": 1000}}
    tokens = pricing.usage_dict(usage)
    # Haiku 4.5: 5-minute write 1.25 $/MTok (2000 tokens), 1-hour write 2 $/MTok (1000 tokens).
    assert pricing.cost_usd("claude-haiku-4-5", tokens) == pytest.approx((2000 * 1.25 + 1000 * 2.0) / 1e6)


def test_search_archive_tool_finds_discards_and_says_when_a_keep_changed_the_premise(fake_anthropic, worktree):
    history = HISTORY + [
        {"n": 2, "status": "crash", "description": "wider mlp", "crash_class": "oom",
         "diff": "-MLP_MULT = 4\n+MLP_MULT = 8"},
        {"n": 3, "status": "keep", "description": "lr 0.03", "summary": {"val_bpb": 1.2},
         "diff": "-MATRIX_LR = 0.02\n+MATRIX_LR = 0.03"},
        {"n": 4, "status": "discard", "description": "depth 3", "summary": {"val_bpb": 1.25},
         "diff": "-DEPTH = 4\n+DEPTH = 3"}]
    fake_anthropic.push(
        F.tool_uses([("search_archive", {"query": "DEPTH"}), ("search_archive", {"query": "warmup"}),
                     ("search_archive", {"query": "  "}), ("search_archive", {"query": "mlp oom"})]),
        F.tool_use("str_replace", EDIT), F.tool_use("submit", SUBMIT))
    proposer(fake_anthropic).propose(request(worktree, history=history))
    depth, none, empty, mlp = fake_anthropic.message_requests()[1].tool_results()
    text = depth["content"]
    assert "2 discarded/crashed experiment(s)" in text and "#3" not in text, "keeps are not in the archive"
    assert text.index("#4 discard") < text.index("#1 discard"), "equal matches: the newest first"
    first, second = text.split("#1 discard")
    assert "no keep since" in first and "premise changed: experiment(s) [3]" in second
    assert "+DEPTH = 2" in second
    assert "No discarded" in none["content"] and empty["is_error"] is True
    assert "#2 crash" in mlp["content"] and "+MLP_MULT = 8" in mlp["content"]


def test_suggest_knobs_hands_the_knob_question_to_the_sampler(fake_anthropic, worktree):
    from search import knobs
    fake_anthropic.push(F.tool_use("str_replace", {"path": "train.py", "old_str": "def main():",
                                                   "new_str": "def main():  # tuned"}),
                        F.tool_use("suggest_knobs", {}), F.tool_use("submit", SUBMIT))
    prop = proposer(fake_anthropic).propose(request(worktree))
    (result,) = fake_anthropic.message_requests()[2].tool_results()
    assert not result.get("is_error") and "set by the sampler" in result["content"]
    assert "def main():  # tuned" in prop.source, "the model's code edit stays"
    assert knobs.values(prop.source) != knobs.values(TRAIN)
    assert (worktree / "optuna.sqlite").exists(), "the run's study made the draw (one study: the hybrid)"
