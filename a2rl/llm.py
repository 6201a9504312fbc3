"""The one OpenAI-compatible chat completions client: every model call a2rl makes goes here.

Four callers speak this protocol: the `llm` agent (`a2rl.clients.llm`, async, tool calls), the
AlpacaEval pairwise judge and its paper annotator (`a2rl.tasks.alpacaeval`), the DeepSearchQA
correctness judge (`a2rl.tasks.deepsearchqa`) and the report narrative
(`a2rl.analysis.narrative`). They differ in what they ask and how they read the answer; they
share what is said here, once:

- **Transport**: the `openai` SDK (`OpenAI` / `AsyncOpenAI`) against `{base_url}/chat/completions`.
  The request body is the caller's dict, sent as is (`extra_body`), so that the wire is what the
  caller wrote (a judge's prompt, an agent's tools), and the answer is read as the JSON it is
  (`with_raw_response`), so that a server's loose dialect (tool arguments as an object, missing
  fields) reaches the caller untouched. The SDK's own retries are off (`max_retries=0`): the
  policy below decides, and each attempt is visible to the caller (the agent's transcript, the
  judges' raw answers and request counts).
- **Key**: read from the variable the endpoint names (`api_key_env`); none set means no
  Authorization header at all (local servers such as vLLM take none), never an empty bearer and
  never the SDK's own fallback to OPENAI_API_KEY. The base URL is always ours too (the SDK's
  OPENAI_BASE_URL does not apply); its organization and project variables still do.
- **Retry policy** (`RetryPolicy`): a failed request is retried when the failure is transient:
  a transport error (connection refused or reset, timeout), HTTP 408, 409, 429 or any 5xx (the
  SDK's own rule), or a 200 whose body is no chat completion. Any other status (400, 401, 403,
  404, 422, ...) fails at once. The wait before retry k (k = 0, 1, ...) is
  `min(max_backoff_s, backoff_s * 2**k)` scaled by a random factor in [0.5, 1] (jitter, so that
  concurrent judges do not retry in lockstep), or the server's `Retry-After` seconds when it
  sends them (capped at `max_backoff_s`). A caller may also refuse an answer (a judge's malformed
  verdict): that attempt counts as a retryable failure under the same policy.

Why not the SDK's built-in retries: they are invisible per attempt, and the agent's transcript
and the judges' records must show each one; the statuses are the SDK's all the same. The loop
itself (attempts, stop, waits, the hook before each wait) is tenacity's; what is retried and how
long to wait are decided here (`_Exchange.retrying`).
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # the SDK costs ~0.4 s to import: only callers that send requests pay it
    import openai

    from a2rl.settings import Settings

__all__ = ["AsyncChatClient", "Attempt", "ChatClient", "Endpoint", "Outcome", "Reply",
           "RequestFailure", "RetryPolicy", "endpoint_refusal", "judge_endpoint",
           "retryable_status"]

T = TypeVar("T")

FailureKind = Literal["http", "transport", "bad_response", "refused_answer"]


def retryable_status(status: int) -> bool:
    """Transient HTTP statuses: 408 (timeout), 409 (lock), 429 (rate limit), any 5xx."""
    return status in (408, 409, 429) or status >= 500


class RetryPolicy(BaseModel):
    """How often and how patiently one request is tried; what is retried is fixed (above)."""

    model_config = ConfigDict(frozen=True)

    max_retries: int = Field(4, ge=0, description="retries after the first attempt")
    backoff_s: float = Field(1.0, ge=0, description="wait before the first retry")
    max_backoff_s: float = Field(60.0, ge=0, description="cap on one wait, Retry-After included")
    timeout_s: float = Field(120.0, gt=0, description="timeout of one request")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (0-based) before the next one."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        base = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
        return base * (0.5 + random.random() / 2)


class Endpoint(BaseModel):
    """Where requests go and which model answers; the key is named, never stored."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"

    @property
    def origin(self) -> str:
        """scheme://host[:port]: what records may show (never a path, query or credential)."""
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.hostname or ''}" + (
            f":{parts.port}" if parts.port else "")

    def api_key(self, environ: Mapping[str, str] | None = None) -> str:
        return (os.environ if environ is None else environ).get(self.api_key_env, "")


def unreachable(base_url: str, timeout_s: float = 5.0,
                environ: Mapping[str, str] | None = None) -> str | None:
    """Why nothing answers at `base_url` (no TCP connection to its host and port), in one line;
    None when something listens there, or when a proxy variable routes its scheme elsewhere
    (the proxy, not us, reaches it). A check before a run is made: a dead endpoint must not
    cost a run, its baseline and an agent that can only crash."""
    import socket

    env = os.environ if environ is None else environ
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{base_url!r} is not an http(s) URL"
    if any(env.get(k) for k in (f"{parts.scheme}_proxy", f"{parts.scheme.upper()}_PROXY",
                                "all_proxy", "ALL_PROXY")):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # a port out of range or not a number
        return f"{base_url!r}: {exc}"
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"nothing answers at {parts.hostname}:{port} ({exc.strerror or exc})"


#: Statuses of the endpoint check that refuse a run: the key (401, 403) or the path (404)
#: is wrong, and every request of the run would be refused the same way.
REFUSING_STATUSES = (401, 403, 404)


def endpoint_refusal(base_url: str, api_key_env: str, *, key_named: bool = False,
                     timeout_s: float = 10.0,
                     environ: Mapping[str, str] | None = None) -> str | None:
    """Why the endpoint at `base_url` will refuse a run's requests, in one line, or None.

    First whether anything answers there (`unreachable`); then one authenticated request,
    `GET {base_url}/models` with the key of `api_key_env` (none when it is unset, as the
    requests will be sent), which costs no tokens: 401 or 403 (the key), or 404 (the path:
    the base URL usually ends in /v1) refuse. Other answers pass: a transient failure
    (429, 5xx) is the retry policy's to handle during the run."""
    import httpx

    env = os.environ if environ is None else environ
    if why := unreachable(base_url, environ=env):
        return why
    key = env.get(api_key_env, "")
    url = f"{base_url.rstrip('/')}/models"
    try:
        response = httpx.get(url, timeout=timeout_s, follow_redirects=True,
                             headers={"Authorization": f"Bearer {key}"} if key else {})
    except httpx.HTTPError as exc:
        return f"GET {url} failed ({type(exc).__name__}: {exc})"
    if response.status_code not in REFUSING_STATUSES:
        return None
    detail = _error_message(response.text)
    if response.status_code == 404:
        return (f"GET {url} answered HTTP 404 ({detail}): is the base URL right? An "
                "OpenAI-compatible one usually ends in /v1")
    sent = (f"with the key in {api_key_env}" if key else
            f"with no key: {api_key_env} is not set" + (
                "" if key_named else " (name the variable with --llm-api-key-env)"))
    return f"GET {url} answered HTTP {response.status_code} ({detail}) {sent}"


def _error_message(body: str) -> str:
    """An error body's message in one line: OpenAI's `{"error": {"message": ...}}`, else the
    start of the text; control characters dropped (it is shown on a terminal)."""
    text = body
    try:
        data = json.loads(body)
        error = data.get("error") if isinstance(data, dict) else None
        text = str(error.get("message") if isinstance(error, dict) else error or data)
    except ValueError:
        pass
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line[:200] or "no body"


def judge_endpoint(settings: Settings) -> tuple[Endpoint, RetryPolicy]:
    """The model-graded scorers' endpoint and policy: the `judge_*` settings."""
    return (Endpoint(base_url=settings.judge.base_url, model=settings.judge.model,
                     api_key_env=settings.judge.api_key_env),
            RetryPolicy(max_retries=settings.judge.max_retries,
                        timeout_s=settings.judge.timeout_s))


@dataclass(frozen=True)
class Reply:
    """A 200 answer: its JSON body and the first choice's message."""

    data: dict[str, Any]
    message: dict[str, Any]

    @property
    def text(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""

    @property
    def choice(self) -> dict[str, Any]:
        return self.data["choices"][0]


@dataclass(frozen=True)
class RequestFailure:
    """One attempt that gave no usable answer. `detail` is the response body's start for
    `http`, the exception for `transport`, the body for `bad_response`, the caller's reason for
    `refused_answer`."""

    kind: FailureKind
    detail: str
    status: int | None = None
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        return self.kind != "http" or retryable_status(self.status or 0)

    def describe(self) -> str:
        """The one-line form the judges record ("http 503: ...", "transport: ...")."""
        if self.kind == "http":
            return f"http {self.status}: {self.detail}"
        if self.kind == "transport":
            return f"transport: {self.detail}"
        if self.kind == "bad_response":
            return f"bad response body: {self.detail}"
        return self.detail


@dataclass(frozen=True)
class Attempt:
    """One request as sent: the answer's text when one came back, else None; the failure."""

    text: str | None
    failure: RequestFailure | None


@dataclass
class Outcome(Generic[T]):
    """A completed exchange: the accepted value (None when every attempt failed)."""

    value: T | None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def failure(self) -> RequestFailure | None:
        return self.attempts[-1].failure if self.value is None and self.attempts else None

    @property
    def error(self) -> str:
        failure = self.failure
        return failure.describe() if failure else ""


#: Reads an accepted answer out of a reply, or says why it is refused (then retried).
Accept = Callable[[Reply], tuple[T | None, str]]
OnRetry = Callable[[int, RequestFailure, float], None]


class _Exchange(Generic[T]):
    """The retry decisions of one request, shared by the sync and the async client: what an
    attempt's result means (`record`) and, for tenacity's loop, when to try again and how long
    to wait first (`retrying`)."""

    def __init__(self, policy: RetryPolicy, accept: Accept[T] | None) -> None:
        self.policy = policy
        self.accept = accept
        self.outcome: Outcome[T] = Outcome(None)

    def record(self, result: Reply | RequestFailure) -> RequestFailure | None:
        """Take one attempt's result: its failure, or None when an answer was accepted."""
        if isinstance(result, RequestFailure):
            self.outcome.attempts.append(Attempt(None, result))
            return result
        value, why = self.accept(result) if self.accept else (result, "")  # type: ignore[assignment]
        failure = None if value is not None else RequestFailure("refused_answer", why)
        self.outcome.attempts.append(Attempt(result.text, failure))
        if value is not None:
            self.outcome.value = value  # type: ignore[assignment]
        return failure

    def retrying(self, on_retry: OnRetry | None, sleep: Callable[[float], Any]) -> dict[str, Any]:
        """tenacity's arguments for this policy: retry a retryable failure up to `max_retries`
        times, wait `RetryPolicy.delay` (the server's Retry-After first), tell `on_retry`
        before each wait, and end on the last failure rather than raising (the outcome holds
        every attempt). An exception other than a request's failure is raised as is."""
        import tenacity

        policy = self.policy

        def wait(state: tenacity.RetryCallState) -> float:
            failure: RequestFailure = state.outcome.result()  # type: ignore[union-attr]
            return policy.delay(state.attempt_number - 1, failure.retry_after)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if on_retry:
                on_retry(state.attempt_number, state.outcome.result(),  # type: ignore[union-attr]
                         state.upcoming_sleep)

        return {"stop": tenacity.stop_after_attempt(policy.max_retries + 1),
                "retry": tenacity.retry_if_result(lambda f: f is not None and f.retryable),
                "wait": wait, "sleep": sleep, "before_sleep": before_sleep,
                "retry_error_callback": lambda state: None}


def _reply(text: str) -> Reply | RequestFailure:
    try:
        data = json.loads(text)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return RequestFailure("bad_response", text[:300])
    if not isinstance(data, dict) or not isinstance(message, dict):
        return RequestFailure("bad_response", text[:300])
    return Reply(data, message)


def _failure(exc: Exception) -> RequestFailure:
    import openai

    if isinstance(exc, openai.APIStatusError):
        after = exc.response.headers.get("retry-after", "")
        retry_after = float(after) if after.replace(".", "", 1).isdigit() else None
        return RequestFailure("http", exc.response.text[:500], exc.status_code, retry_after)
    cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ else exc
    return RequestFailure("transport", f"{type(cause).__name__}: {cause}")


class _Base:
    def __init__(self, endpoint: Endpoint, policy: RetryPolicy | None = None, *,
                 api_key: str | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.policy = policy or RetryPolicy()
        self._key = api_key if api_key is not None else endpoint.api_key(environ)
        self.requests_made = 0  # every attempt sent, across threads
        self._count_lock = threading.Lock()

    def _sdk_kwargs(self) -> dict[str, Any]:
        # a placeholder key keeps the SDK from reading OPENAI_API_KEY; without our key the
        # Authorization header is omitted per request (`_request`)
        return {"api_key": self._key or "unused", "base_url": self.endpoint.base_url.rstrip("/"),
                "max_retries": 0, "timeout": self.policy.timeout_s}

    def _request(self, body: Mapping[str, Any]) -> dict[str, Any]:
        import openai

        with self._count_lock:
            self.requests_made += 1
        params = dict(body)
        model = params.pop("model", self.endpoint.model)
        messages = params.pop("messages")
        return {"model": model, "messages": messages, "extra_body": params,
                "extra_headers": {} if self._key else {"Authorization": openai.Omit()}}


class ChatClient(_Base):
    """Synchronous chat completions (judges, narrative); safe to share across threads."""

    def __init__(self, endpoint: Endpoint, policy: RetryPolicy | None = None, *,
                 api_key: str | None = None, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(endpoint, policy, api_key=api_key, environ=environ)
        self._sdk: openai.OpenAI | None = None
        self._sdk_lock = threading.Lock()

    def _client(self) -> openai.OpenAI:
        with self._sdk_lock:
            if self._sdk is None:
                import openai

                self._sdk = openai.OpenAI(**self._sdk_kwargs())
            return self._sdk

    def send(self, body: Mapping[str, Any]) -> Reply | RequestFailure:
        """One request, no retry: `body` is the JSON sent (`model` defaults to the endpoint's)."""
        import openai

        try:
            raw = self._client().chat.completions.with_raw_response.create(**self._request(body))
        except (openai.APIError, ValueError) as exc:
            return _failure(exc)
        return _reply(raw.text)

    def complete(self, body: Mapping[str, Any], accept: Accept[T] | None = None,
                 on_retry: OnRetry | None = None) -> Outcome[T]:
        """`send` under the retry policy until an answer is accepted or the policy gives up."""
        import time

        import tenacity

        exchange: _Exchange[T] = _Exchange(self.policy, accept)
        tenacity.Retrying(**exchange.retrying(on_retry, time.sleep))(
            lambda: exchange.record(self.send(body)))
        return exchange.outcome

    def close(self) -> None:
        if self._sdk is not None:
            self._sdk.close()


class AsyncChatClient(_Base):
    """The same for async callers (the `llm` agent): cancellable while waiting."""

    def __init__(self, endpoint: Endpoint, policy: RetryPolicy | None = None, *,
                 api_key: str | None = None, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(endpoint, policy, api_key=api_key, environ=environ)
        import openai

        self._sdk = openai.AsyncOpenAI(**self._sdk_kwargs())

    async def send(self, body: Mapping[str, Any]) -> Reply | RequestFailure:
        import openai

        try:
            raw = await self._sdk.chat.completions.with_raw_response.create(
                **self._request(body))
        except (openai.APIError, ValueError) as exc:
            return _failure(exc)
        return _reply(raw.text)

    async def complete(self, body: Mapping[str, Any], accept: Accept[T] | None = None,
                       on_retry: OnRetry | None = None) -> Outcome[T]:
        import anyio
        import tenacity

        exchange: _Exchange[T] = _Exchange(self.policy, accept)

        async def attempt() -> RequestFailure | None:
            return exchange.record(await self.send(body))

        await tenacity.AsyncRetrying(**exchange.retrying(on_retry, anyio.sleep))(attempt)
        return exchange.outcome

    async def aclose(self) -> None:
        await self._sdk.close()
