"""The chat-completions client against a real HTTP server on loopback."""

import time

import pytest
from llm_server import LLMServer

from chunktree.checks import InvalidValueError
from chunktree.engine.read.llm import ChatClient, LLMError

MESSAGES = [{"role": "system", "content": "You are the manager agent."},
            {"role": "user", "content": 'Question: q\n\nMemory: {"conclusion": "c", "open_questions": [], "evidence": []}'}]


@pytest.fixture
def server():
    with LLMServer() as s:
        yield s


def test_normal_reply_and_request_shape(server):
    client = ChatClient(server.base_url, "memory", api_key="secret", backoff=0)
    reply = client.complete(MESSAGES, max_tokens=50)
    assert reply.text == "ANSWER: c" and reply.prompt_tokens == 10 and reply.completion_tokens == 5
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer secret"
    assert req["body"]["model"] == "memory" and req["body"]["messages"] == MESSAGES
    assert req["body"]["max_tokens"] == 50 and req["body"]["temperature"] == 0.0


def test_settings_from_environment(server, monkeypatch):
    monkeypatch.setenv("CHUNKTREE_LLM_BASE_URL", server.base_url)
    monkeypatch.setenv("CHUNKTREE_LLM_MODEL", "memory")
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert ChatClient().complete(MESSAGES).text == "ANSWER: c"
    assert server.requests[0]["auth"] == "Bearer from-env"


def test_429_is_retried(server):
    reply = ChatClient(server.base_url, "429-once", backoff=5).complete(MESSAGES)  # Retry-After: 0 wins
    assert reply.text == "ANSWER: c" and len(server.requests) == 2


def test_500_until_failure(server):
    with pytest.raises(LLMError, match="failed after 3 attempts; last: HTTP 500"):
        ChatClient(server.base_url, "500", retries=2, backoff=0.01).complete(MESSAGES)
    assert len(server.requests) == 3


def test_other_4xx_is_not_retried(server):
    with pytest.raises(LLMError, match=r"rejected the request.*HTTP 400.*bad request"):
        ChatClient(server.base_url, "400", retries=3, backoff=0.01).complete(MESSAGES)
    assert len(server.requests) == 1


def test_body_that_is_not_json(server):
    with pytest.raises(LLMError, match="not a chat completion"):
        ChatClient(server.base_url, "body-not-json").complete(MESSAGES)


def test_timeout(server):
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match="failed after 2 attempts; last: ReadTimeout"):
        ChatClient(server.base_url, "slow", timeout=0.3, retries=1, backoff=0.01).complete(MESSAGES)
    assert time.perf_counter() - t0 < 2.0


def test_connection_refused():
    with pytest.raises(LLMError, match="ConnectError"):
        ChatClient("http://127.0.0.1:9/v1", "memory", retries=0).complete(MESSAGES)


def test_missing_settings(monkeypatch):
    for name in ("CHUNKTREE_LLM_BASE_URL", "OPENAI_BASE_URL", "CHUNKTREE_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="base_url is required"):
        ChatClient(model="m")
    with pytest.raises(ValueError, match="model is required"):
        ChatClient("http://127.0.0.1:1/v1")


# -- a hostile or broken endpoint (the hostile round's NH-9, NH-13, NH-25): each request bounded --

def test_a_retry_after_past_the_cap_fails_at_once(server):
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match=r"asks to retry after 3600 s, longer than max_retry_after \(60 s\)"):
        ChatClient(server.base_url, "retry-after-3600").complete(MESSAGES)
    assert len(server.requests) == 1 and time.perf_counter() - t0 < 30


def test_a_dripping_reply_is_cut_at_the_request_deadline(server):
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match=r"failed after 2 attempts; last: TimeoutError: the reply took longer than 1 s"):
        ChatClient(server.base_url, "drip", timeout=1.0, retries=1, backoff=0).complete(MESSAGES)
    assert len(server.requests) == 2 and time.perf_counter() - t0 < 10  # 200 bytes at 5 a second: 40 s a try


def test_an_endpoint_that_never_answers_is_bounded_by_the_run_deadline(server):
    client = ChatClient(server.base_url, "silent", timeout=5.0, run_timeout=1.5, retries=3, backoff=0)
    t0 = time.perf_counter()
    with pytest.raises(LLMError):
        client.complete(MESSAGES)
    with pytest.raises(LLMError, match=r"the run's LLM time \(run_timeout, 1.5 s\) is spent"):
        client.complete(MESSAGES)  # the next step fails at once
    assert time.perf_counter() - t0 < 10


def test_a_reply_past_max_reply_bytes_is_refused_unread(server):
    with pytest.raises(LLMError, match=r"sent a reply longer than max_reply_bytes \(1,048,576\)"):
        ChatClient(server.base_url, "huge", max_reply_bytes=1 << 20, retries=0).complete(MESSAGES)


@pytest.mark.parametrize("model, message", [("nested", "not a chat completion"),
                                            ("content-list", "a non-text message content")])
def test_a_malformed_reply_is_an_llm_error_not_a_traceback(server, model, message):
    with pytest.raises(LLMError, match=message):
        ChatClient(server.base_url, model, retries=0).complete(MESSAGES)


# -- our own hostile round (OH-n in the note): the LLM endpoint --

def test_oh37_a_compressed_reply_is_capped_as_it_decodes(server):
    with pytest.raises(LLMError, match=r"sent a reply longer than max_reply_bytes \(1,048,576\)"):
        ChatClient(server.base_url, "gzip-bomb", max_reply_bytes=1 << 20, retries=0).complete(MESSAGES)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "localhost:8080/v1", "ftp://x/v1"])
def test_oh38_a_base_url_that_is_not_http_is_refused_before_any_request(url):
    with pytest.raises(InvalidValueError, match=r"base_url must be an http:// or https:// URL; got"):
        ChatClient(url, "m")


@pytest.mark.parametrize("model, message", [
    ("redirect", r"rejected the request \(HTTP 302"),                       # OH-39
    ("reset", r"failed after 2 attempts; last: (RemoteProtocolError|ReadError)"),  # OH-40
    ("content-null", "a non-text message content: None"),                   # OH-41
])
def test_oh39_41_odd_answers_are_named_llm_errors(server, model, message):
    with pytest.raises(LLMError, match=message):
        ChatClient(server.base_url, model, retries=1, backoff=0).complete(MESSAGES)


def test_oh42_a_usage_that_is_not_token_counts_is_left_out(server):
    reply = ChatClient(server.base_url, "usage-odd", retries=0).complete(MESSAGES)
    assert reply.text == "fine" and reply.prompt_tokens is None and reply.completion_tokens is None
