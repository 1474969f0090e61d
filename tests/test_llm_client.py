"""llm/client.py through the real anthropic SDK against the local Messages API (tests/fake_anthropic.py)."""
import anthropic
import pytest

from llm import client as llm
from tests.fake_anthropic import FakeAnthropic, fake_anthropic  # noqa: F401  (fixture)

F = FakeAnthropic
KEY = "sk-ant-test-llm-client"


def client(fake, role="arms", model=None, **retry):
    policy = llm.RetryPolicy(**dict(dict(sdk_max_retries=0, timeout=5.0, backoff_base=0.01), **retry))
    lines = []
    c = llm.LLMClient(role, model, api_key=KEY, base_url=fake.base_url, retry=policy, on_retry=lines.append)
    return c, lines


def ask(c):
    return c.create(max_tokens=100, messages=[{"role": "user", "content": "hello"}])


def test_model_selection_default_role_env_and_explicit(fake_anthropic, monkeypatch):
    for env in llm.ROLE_ENV.values():
        monkeypatch.delenv(env, raising=False)
    assert {llm.model_for(r) for r in ("proposer", "judge", "arms", "other")} == {llm.DEFAULT_MODEL}
    monkeypatch.setenv("AUTORESEARCH_ARMS_MODEL", "claude-haiku-4-5")
    monkeypatch.setenv("AUTORESEARCH_JUDGE_MODEL", "claude-opus-4-6")
    assert llm.model_for("arms") == "claude-haiku-4-5" and llm.model_for("judge") == "claude-opus-4-6"
    assert llm.model_for("proposer") == llm.DEFAULT_MODEL           # another role's variable is not its
    assert llm.model_for("arms", "claude-sonnet-4-6") == "claude-sonnet-4-6"   # explicit beats the env
    fake_anthropic.push(F.text("a"), F.text("b"))
    ask(client(fake_anthropic, "arms")[0])
    ask(client(fake_anthropic, "judge", model="claude-3-5-haiku")[0])
    sent = [r.body["model"] for r in fake_anthropic.message_requests()]
    assert sent == ["claude-haiku-4-5", "claude-3-5-haiku"]


def test_retry_on_529_and_500_then_success(fake_anthropic):
    fake_anthropic.push(F.error(529, "overloaded", retry_after_ms=10), F.error(500, "boom"),
                        F.text("fine", usage={"input_tokens": 10, "output_tokens": 2}))
    c, lines = client(fake_anthropic, patience=30.0)
    reply = ask(c)
    reqs = fake_anthropic.message_requests()
    assert [r.reply_status for r in reqs] == [529, 500, 200]
    assert reqs[0].body == reqs[1].body == reqs[2].body                # the same request, retried
    assert reply.text == "fine" and reply.retries == 2 and c.totals["retries"] == 2
    assert len(lines) == 2 and lines[0].startswith("arms call failed, retry 1: 529")


def test_patience_zero_leaves_retries_to_the_sdk(fake_anthropic):
    fake_anthropic.push(F.error(500, "boom"), F.text("after the SDK's retry"))
    c, lines = client(fake_anthropic, sdk_max_retries=1)
    reply = ask(c)
    assert reply.text == "after the SDK's retry" and reply.retries == 0 and lines == []
    fake_anthropic.push(F.error(529, "overloaded"), F.error(529, "overloaded"))
    with pytest.raises(llm.LLMUnavailable) as err:
        ask(c)
    assert isinstance(err.value.cause, anthropic.APIStatusError) and err.value.cause.status_code == 529
    assert len(fake_anthropic.message_requests()) == 4                 # 2 + (1 try + 1 SDK retry)


def test_outage_past_patience_is_unavailable(fake_anthropic):
    fake_anthropic.default = F.error(503, "down", retry_after_ms=50)
    c, lines = client(fake_anthropic, patience=0.5)
    with pytest.raises(llm.LLMUnavailable, match="down for"):
        ask(c)
    assert len(fake_anthropic.message_requests()) >= 3 and len(lines) >= 3


def test_bad_key_and_bad_request_are_not_retried(fake_anthropic):
    fake_anthropic.push(F.error(401, "invalid x-api-key"), F.error(400, "prompt is too long"))
    c, _ = client(fake_anthropic, patience=30.0)
    with pytest.raises(llm.LLMUnavailable, match="401"):
        ask(c)
    with pytest.raises(llm.LLMRequestError, match="prompt is too long"):
        ask(c)
    assert len(fake_anthropic.message_requests()) == 2


def test_tokens_cost_and_tool_calls_are_accounted(fake_anthropic):
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 500,
             "cache_creation_input_tokens": 300}
    fake_anthropic.push(F.tool_use("record", {"x": 1}, usage=usage, text="thinking"),
                        F.text("second", usage={"input_tokens": 100, "output_tokens": 10}))
    c, _ = client(fake_anthropic, model="claude-haiku-4-5")          # $1 / $5 per MTok
    first = ask(c)
    assert first.text == "thinking" and first.stop_reason == "tool_use"
    assert [(t.name, t.input) for t in first.tool_calls] == [("record", {"x": 1})]
    assert first.tokens == {"input": 1000, "output": 200, "cache_read": 500, "cache_write": 300,
                            "cache_write_1h": 0}
    assert first.cost_usd == pytest.approx((1000 * 1.0 + 200 * 5.0 + 500 * 0.1 + 300 * 1.25) / 1e6)
    second = ask(c)
    assert second.tool_calls == [] and second.cost_usd == pytest.approx((100 + 50) / 1e6)
    assert c.totals["calls"] == 2 and c.totals["tokens"]["input"] == 1100 and c.totals["tokens"]["output"] == 210
    assert c.totals["cost_usd"] == pytest.approx(first.cost_usd + second.cost_usd)


def test_client_from_the_environment(fake_anthropic, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    assert not llm.available()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    assert llm.available()
    fake_anthropic.push(F.text("one"), F.text("two"))
    ask(llm.LLMClient("arms"))                                          # no key: the placeholder
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    ask(llm.LLMClient("arms"))
    keys = [r.api_key() for r in fake_anthropic.message_requests()]
    assert keys == [llm.NO_KEY, KEY]
