"""The one OpenAI-compatible client (`a2rl.llm`) and the answer cache (`a2rl.llm_cache`), through
the real local server `fake_openai.FakeOpenAI`: what is retried and how long it waits, what is
sent, the key, and that no other module speaks the protocol on its own."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import pytest

from a2rl.llm import (
    AsyncChatClient,
    ChatClient,
    Endpoint,
    Reply,
    RequestFailure,
    RetryPolicy,
    judge_endpoint,
    retryable_status,
)
from a2rl.llm_cache import AnswerCache, cache_key, cached_map
from a2rl.settings import Settings

from .fake_openai import Call, FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent
FAST = RetryPolicy(max_retries=3, backoff_s=0.001, timeout_s=10)


def client(fake: FakeOpenAI, policy: RetryPolicy = FAST, **kw: Any) -> ChatClient:
    return ChatClient(Endpoint(base_url=fake.base_url, model="judge-m"), policy, **kw)


def hello() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}]}


# --- the policy ----------------------------------------------------------------------------
@pytest.mark.parametrize("status,retry", [
    (408, True), (409, True), (429, True), (500, True), (502, True), (503, True), (504, True),
    (529, True), (400, False), (401, False), (403, False), (404, False), (422, False)])
def test_retryable_statuses(status: int, retry: bool) -> None:
    assert retryable_status(status) is retry
    assert RequestFailure("http", "x", status).retryable is retry


def test_backoff_doubles_with_jitter_and_caps() -> None:
    policy = RetryPolicy(backoff_s=1.0, max_backoff_s=5.0)
    for attempt, base in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 5.0), (10, 5.0)]:
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(base / 2 <= d <= base for d in delays), (attempt, min(delays), max(delays))
        assert len(set(delays)) > 1  # jitter: concurrent judges do not retry in lockstep
    assert policy.delay(0, retry_after=3.0) == 3.0  # the server's word, no jitter
    assert policy.delay(0, retry_after=120.0) == 5.0  # capped


def test_transport_and_bad_bodies_are_retryable_refusals_too() -> None:
    assert RequestFailure("transport", "ConnectError: refused").retryable
    assert RequestFailure("bad_response", "<html>").retryable
    assert RequestFailure("refused_answer", "malformed").retryable
    assert RequestFailure("http", "x", 503).describe() == "http 503: x"
    assert RequestFailure("transport", "ConnectError: y").describe() == "transport: ConnectError: y"


# --- one request ----------------------------------------------------------------------------
def test_body_is_sent_as_written_and_the_answer_read_as_sent() -> None:
    tools = [{"type": "function", "function": {"name": "pick", "parameters": {}}}]
    with FakeOpenAI(["plain text", Call("pick", {"k": 1})]) as fake:
        c = client(fake, api_key="sk-1")
        first = c.complete({**hello(), "temperature": 0, "max_tokens": 4})
        second = c.complete({"model": "other", **hello(), "tools": tools,
                             "tool_choice": "auto"})
    assert fake.requests[0] == {"model": "judge-m", **hello(), "temperature": 0, "max_tokens": 4}
    assert fake.requests[1] == {"model": "other", **hello(), "tools": tools,
                                "tool_choice": "auto"}
    assert isinstance(first.value, Reply) and first.value.text == "plain text"
    assert second.value and second.value.message["tool_calls"][0]["function"] == {
        "name": "pick", "arguments": '{"k": 1}'}
    assert second.value.choice["finish_reason"] == "tool_calls"
    assert c.requests_made == 2 and [len(o.attempts) for o in (first, second)] == [1, 1]
    assert all(h["authorization"] == "Bearer sk-1" for h in fake.headers)


def test_key_comes_from_the_named_variable_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key: no Authorization header at all (the SDK must not fall back to OPENAI_API_KEY,
    nor send an empty bearer); a key in the named variable: a bearer."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")
    with FakeOpenAI(["a", "b"]) as fake:
        ep = Endpoint(base_url=fake.base_url, model="m", api_key_env="JUDGE_KEY")
        ChatClient(ep, FAST, environ={}).complete(hello())
        ChatClient(ep, FAST, environ={"JUDGE_KEY": "sk-judge"}).complete(hello())
    assert "authorization" not in fake.headers[0]
    assert fake.headers[1]["authorization"] == "Bearer sk-judge"


# --- retries ---------------------------------------------------------------------------------
def test_transient_statuses_are_retried_and_each_attempt_is_seen() -> None:
    seen: list[tuple[int, str, float]] = []
    with FakeOpenAI(["ok"]) as fake:
        fake.fail(503)
        fake.fail(429, retry_after="0.05")
        c = client(fake)
        out = c.complete(hello(), on_retry=lambda n, f, d: seen.append((n, f.describe(), d)))
    assert out.value and out.value.text == "ok" and len(fake.requests) == 3
    assert [(n, text.split(":")[0]) for n, text, _ in seen] == [(1, "http 503"), (2, "http 429")]
    assert 0.0005 <= seen[0][2] <= 0.001 and seen[1][2] == 0.05  # backoff, then Retry-After
    assert [a.failure.status if a.failure else None for a in out.attempts] == [503, 429, None]
    assert "injected 503" in (out.attempts[0].failure.detail if out.attempts[0].failure else "")
    assert c.requests_made == 3


def test_a_client_error_fails_at_once() -> None:
    with FakeOpenAI(["never"]) as fake:
        fake.fail(400, times=5)
        out = client(fake).complete(hello())
    assert out.value is None and len(out.attempts) == 1 and len(fake.requests) == 1
    assert out.failure and not out.failure.retryable and out.error.startswith("http 400")


def test_retries_run_out_after_max_retries() -> None:
    with FakeOpenAI(["never"]) as fake:
        fake.fail(500, times=10)
        out = client(fake, RetryPolicy(max_retries=2, backoff_s=0.001)).complete(hello())
    assert out.value is None and len(fake.requests) == 3 and len(out.attempts) == 3


def test_a_body_that_is_no_chat_completion_is_retried() -> None:
    with FakeOpenAI(["fine"]) as fake:
        fake.fail(200)  # a 200 with an error object and no choices
        out = client(fake).complete(hello())
    assert out.value and out.value.text == "fine"
    first = out.attempts[0].failure
    assert first and first.kind == "bad_response" and "injected 200" in first.detail


def test_refused_answers_are_retried_under_the_same_policy() -> None:
    with FakeOpenAI(["Output (a)", "maybe", "M"]) as fake:
        out = client(fake).complete(
            hello(), lambda r: (r.text, "") if r.text in ("m", "M") else (None, f"bad {r.text}"))
    assert out.value == "M" and [a.text for a in out.attempts] == ["Output (a)", "maybe", "M"]
    with FakeOpenAI(["no"] * 5) as fake:
        out = client(fake, RetryPolicy(max_retries=1, backoff_s=0.001)).complete(
            hello(), lambda r: (None, "never good"))
    assert out.value is None and len(fake.requests) == 2 and out.error == "never good"


def test_unreachable_endpoint_is_a_transport_failure() -> None:
    with FakeOpenAI([]) as fake:
        url = fake.base_url  # nothing listens there once closed
    c = ChatClient(Endpoint(base_url=url, model="m"), RetryPolicy(max_retries=1,
                                                                   backoff_s=0.001, timeout_s=2))
    out = c.complete(hello())
    assert out.value is None and len(out.attempts) == 2
    assert out.failure and out.failure.kind == "transport" and "ConnectError" in out.error


def test_one_client_is_shared_by_threads() -> None:
    with FakeOpenAI(["x"] * 16) as fake:
        c = client(fake)
        threads = [threading.Thread(target=c.complete, args=(hello(),)) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert c.requests_made == 16 and len(fake.requests) == 16


@pytest.mark.anyio
async def test_async_client_retries_the_same_way() -> None:
    seen: list[int] = []
    with FakeOpenAI([Call("read_file", {"path": "TASK.md"})]) as fake:
        fake.fail(502)
        c = AsyncChatClient(Endpoint(base_url=fake.base_url, model="agent-m"), FAST,
                            environ={})
        try:
            out = await c.complete(hello(), on_retry=lambda n, f, d: seen.append(n))
        finally:
            await c.aclose()
    assert seen == [1] and len(fake.requests) == 2 and "authorization" not in fake.headers[0]
    assert out.value and out.value.message["tool_calls"][0]["function"]["name"] == "read_file"


def test_judge_endpoint_reads_the_judge_settings(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, judge={"base_url": "http://127.0.0.1:1/v1", "model": "j",
                                              "api_key_env": "JK", "max_retries": 7,
                                              "timeout_s": 9})
    endpoint, policy = judge_endpoint(settings)
    assert (endpoint.base_url, endpoint.model, endpoint.api_key_env) == (
        "http://127.0.0.1:1/v1", "j", "JK")
    assert (policy.max_retries, policy.timeout_s) == (7, 9)
    assert Endpoint(base_url="https://user:pw@api.example.com:8443/v1?x=1",
                    model="m").origin == "https://api.example.com:8443"


# --- the answer cache ------------------------------------------------------------------------
def test_cached_map_asks_once_keeps_order_and_never_caches_errors(tmp_path: Path) -> None:
    cache = AnswerCache(tmp_path / "c" / "judge.sqlite")
    asked: list[int] = []
    answers = {0: "a", 1: None, 2: "c", 3: "d"}  # None: an error

    def ask(i: int) -> dict[str, Any]:
        asked.append(i)
        return {"i": i, "answer": answers[i], "cached": False}

    def run(keys: list[str | None]) -> list[dict[str, Any]]:
        return cached_map(cache, "m", keys, ask,
                          lambda r: None if r["answer"] is None else {"answer": r["answer"]},
                          lambda hit: {"answer": hit["answer"], "cached": True}, concurrency=3)

    keys: list[str | None] = [cache_key("q", str(i)) for i in range(3)] + [None]
    first = run(keys)
    assert sorted(asked) == [0, 1, 2, 3] and [r["answer"] for r in first] == ["a", None, "c", "d"]
    asked.clear()
    again = run(keys)
    assert sorted(asked) == [1, 3]  # the error and the uncached key are asked again
    assert [r["cached"] for r in again] == [True, False, True, False]
    assert AnswerCache(cache.path).get(keys[0]) == {"answer": "a"}  # on disk, for a fresh one
    assert cache_key("a", "bc") != cache_key("ab", "c")


# --- one home -------------------------------------------------------------------------------
def _sources() -> list[Path]:
    skip = {".venv", "tests", ".git", "node_modules"}
    return [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]


def test_only_a2rl_llm_speaks_the_protocol() -> None:
    """No module but `a2rl/llm.py` imports the SDK, none keeps a private list of retryable
    statuses, and none that names the chat completions route imports an HTTP client."""
    http_clients = {"httpx", "requests", "aiohttp", "urllib.request", "http.client"}
    offenders = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "a2rl/llm.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                    | ast.AsyncFunctionDef)
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}
        imported: set[str] = set()
        names_route = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module)
            elif isinstance(node, ast.Name) and node.id == "RETRY_STATUSES":
                offenders.append(f"{rel}: RETRY_STATUSES")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings and "chat/completions" in node.value):
                names_route = True
        roots = {m.split(".")[0] for m in imported} | imported
        if "openai" in roots:
            offenders.append(f"{rel}: imports openai")
        if names_route and roots & http_clients:
            offenders.append(f"{rel}: posts chat completions itself")
    assert offenders == []


def test_judges_live_with_their_tasks() -> None:
    """grading/ imports neither AlpacaEval nor DeepSearchQA, and those two tasks import nothing
    from grading/ but its seam (the judge protocols are theirs, the client is a2rl's)."""
    def imports(folder: str) -> set[str]:
        found: set[str] = set()
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    found.add("." * node.level + node.module)
                elif isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
        return found

    assert not (ROOT / "grading" / "judge.py").exists()
    grading = imports("grading")
    assert not {m for m in grading if "alpacaeval" in m or "deepsearchqa" in m}
    for task in ("alpacaeval", "deepsearchqa"):
        mods = imports(f"tasks/{task}")
        # only through the seam grading defines for tasks (an engine's prompt types)
        assert not {m for m in mods if "grading" in m and m != "a2rl.grading.seam"}, task
