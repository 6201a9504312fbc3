"""The `llm` connector's agent loop against a real local fake of an OpenAI-compatible server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from a2rl.clients.base import AgentContext, McpEndpoint
from a2rl.clients.llm import LlmAgentError, LlmConnector
from a2rl.clients.llm.context import message_size, trim_context
from a2rl.clients.reference import script
from a2rl.server import build_server, create_run, finish_run
from a2rl.store import Run, Store

from .conftest import require_bwrap
from .fake_openai import Call, FakeOpenAI, Poll, Step, json_field, latest
from .helpers import calls

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

FAST = {"llm_backoff_s": "0.01", "llm_retries": "3"}


def context(run: Run, home: Path, base_url: str, model: str | None = "fake-model",
            **options: str) -> AgentContext:
    return AgentContext(run_id=run.id, prompt=f"Improve the model on task {run.task_id}.",
                        home=home, endpoint=McpEndpoint(url="memory://", token="unused"),
                        model=model, budget_s=run.budget_s,
                        options={"llm_base_url": base_url, **FAST, **options})


@pytest.fixture
def run(settings, store: Store) -> Iterator[Run]:  # type: ignore[no-untyped-def]
    created = create_run(settings, store, task_id="fixture", budget="30m", baseline=False)
    yield created.run
    finish_run(settings, store, created.run.id)


async def drive(settings, store: Store, run: Run, steps: list[Step], tmp_path: Path,  # type: ignore[no-untyped-def]
                fail: tuple[int, int] | None = None, **options: str
                ) -> tuple[LlmConnector, FakeOpenAI]:
    agent = LlmConnector()
    with FakeOpenAI(steps) as fake:
        if fail:
            fake.fail(*fail)
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as client:
            await agent.run(client, context(run, tmp_path, fake.base_url, **options))
    assert not fake.errors, fake.errors[0]
    return agent, fake


def tool_messages(agent: LlmConnector) -> list[dict[str, Any]]:
    return [e["message"] for e in agent.transcript
            if e["kind"] == "message" and e["message"]["role"] == "tool"]


async def test_bad_calls_become_error_messages_and_the_loop_goes_on(
        settings, store: Store, run: Run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    steps: list[Step] = [
        Call("read_file", '{"path": "TASK.md"'),  # malformed JSON
        [Call("no_such_tool", {"x": 1}), Call("read_file", "[1, 2]")],
        Call("read_file", {"path": "TASK.md"}),
        Call("read_file", {"nope": 1}),  # valid JSON that the tool's schema refuses
        "done",
    ]
    agent, fake = await drive(settings, store, run, steps, tmp_path)
    texts = [m["content"] for m in tool_messages(agent)]
    assert texts[4].startswith("Error:") and "path" in texts[4], texts[4]
    assert "not valid JSON" in texts[0]
    assert "unknown tool 'no_such_tool'" in texts[1] and "read_file" in texts[1]
    assert "must be a JSON object" in texts[2]
    assert json.loads(texts[3])["path"] == "TASK.md" and "fixture" in texts[3]
    assert agent.stop_reason == "done" and len(fake.requests) == 5
    # each tool message answers its call, by id
    ids = [m["tool_call_id"] for m in tool_messages(agent)]
    asked = [tc["id"] for e in agent.transcript if e["kind"] == "message"
             for tc in e["message"].get("tool_calls") or []]
    assert ids == asked and len(set(ids)) == 5
    # the malformed and unknown calls never reach the server; the schema-refused one is recorded
    assert [c.tool for c in calls(store, run.id)] == ["read_file", "read_file"]
    first = fake.requests[0]
    assert first["tool_choice"] == "auto" and first["model"] == "fake-model"
    assert first["messages"][0]["role"] == "system" and "budget" in first["messages"][0]["content"]
    assert first["messages"][1] == {"role": "user", "content": "Improve the model on task fixture."}


async def test_server_errors_are_retried(settings, store: Store, run: Run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    agent, fake = await drive(settings, store, run, ["done"], tmp_path, fail=(500, 2),
                              llm_api_key_env="FAKE_KEY")
    assert len(fake.requests) == 3 and agent.stop_reason == "done"
    assert [e["attempt"] for e in agent.transcript if e["kind"] == "retry"] == [1, 2]
    assert all(h["authorization"] == "Bearer sk-test" for h in fake.headers)


async def test_no_key_no_authorization_header(settings, store: Store, run: Run,  # type: ignore[no-untyped-def]
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _agent, fake = await drive(settings, store, run, ["done"], tmp_path)
    assert "authorization" not in fake.headers[0]


@pytest.mark.parametrize("status,attempts,expect", [
    (400, 1, "refused the request (HTTP 400"),  # a client error is not retried
    (401, 1, "refused the request (HTTP 401"),
    (429, 4, "failed after 4 attempts (HTTP 429"),  # retries run out
])
async def test_persistent_errors_raise_clearly(settings, store: Store, run: Run,  # type: ignore[no-untyped-def]
                                               tmp_path: Path, status: int, attempts: int,
                                               expect: str) -> None:
    with FakeOpenAI(["done"]) as fake:
        fake.fail(status, 10)
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as client:
            with pytest.raises(LlmAgentError, match="model endpoint") as err:
                await LlmConnector().run(client, context(run, tmp_path, fake.base_url))
    assert expect in str(err.value) and f"injected {status}" in str(err.value)
    assert len(fake.requests) == attempts


async def test_unreachable_endpoint_raises_after_retries(settings, store: Store, run: Run,  # type: ignore[no-untyped-def]
                                                         tmp_path: Path) -> None:
    with FakeOpenAI([]) as fake:
        url = fake.base_url  # a port that nothing listens on once closed
    agent = LlmConnector()
    async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                      mode="legacy") as client:
        with pytest.raises(LlmAgentError, match="failed after 4 attempts.*ConnectError"):
            await agent.run(client, context(run, tmp_path, url))
    assert agent.transcript[-1] == {"kind": "stop", "reason": "error", "turns": 1}


@pytest.mark.parametrize("model,options,expect", [
    (None, {}, "needs a model"),
    ("m", {"llm_base_url": ""}, "needs an endpoint"),
    ("m", {"llm_max_turns": "many"}, "invalid llm option"),
])
async def test_configuration_errors(settings, store: Store, run: Run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                    model: str | None, options: dict[str, str],
                                    expect: str) -> None:
    with FakeOpenAI(["done"]) as fake:
        async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                          mode="legacy") as client:
            ctx = context(run, tmp_path, fake.base_url, model=model, **options)
            with pytest.raises(LlmAgentError, match=expect):
                await LlmConnector().run(client, ctx)
    assert fake.requests == []


async def test_context_stays_bounded_and_oldest_outputs_go_first(
        settings, store: Store, run: Run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    big = "".join(f"line {i:05d} " + "x" * 80 + "\n" for i in range(200))  # ~18k chars
    (Path(run.workspace) / "code" / "big.txt").write_text(big)
    steps: list[Step] = [Call("read_file", {"path": "code/big.txt"}) for _ in range(8)] + ["done"]
    budget = 12_000
    agent, fake = await drive(settings, store, run, steps, tmp_path, llm_tool_output_chars="2000",
                              llm_context_chars=str(budget))
    outputs = tool_messages(agent)
    assert len(outputs) == 8 and all(len(m["content"]) < 2100 for m in outputs)
    assert "chars truncated" in outputs[0]["content"]
    assert "line 00199" in outputs[0]["content"]  # the tail survives the cut
    for request in fake.requests:
        assert sum(message_size(m) for m in request["messages"]) <= budget
    last = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    elided = ["older tool output elided" in m["content"] for m in last]
    assert elided[0] and not elided[-1] and not elided[-2]
    assert elided == sorted(elided, reverse=True)  # a prefix: the oldest go first
    assert all("_elided" not in m for m in last)  # our bookkeeping is not sent
    assert not any("elided" in m["content"] for m in outputs)  # the transcript keeps them


def test_trim_context_order_and_protection() -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s" * 500},
                                  {"role": "user", "content": "u" * 500}]
    for i in range(6):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "edit_file", "arguments": json.dumps({"t": "a" * 1000})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "r" * 1000})
    before = [dict(m) for m in msgs]
    assert trim_context(msgs, 10**6) == 0 and msgs == before
    trim_context(msgs, 11_000)  # eliding tool outputs suffices
    tools = [m for m in msgs if m["role"] == "tool"]
    assert sum(map(message_size, msgs)) <= 11_000
    assert "elided" in tools[0]["content"] and tools[-1]["content"] == "r" * 1000
    assert all("elided" not in m["tool_calls"][0]["function"]["arguments"]
               for m in msgs if m["role"] == "assistant")
    trim_context(msgs, 5_000)  # then the oldest assistant arguments, never the last 2 turns
    assert msgs[:2] == before[:2] and msgs[-4:] == before[-4:]
    args = [m["tool_calls"][0]["function"]["arguments"] for m in msgs if m["role"] == "assistant"]
    assert "older arguments elided: 1" in json.loads(args[0])["_elided"]
    assert before[3]["content"] == "r" * 1000  # the originals are not mutated


async def test_stops_when_the_budget_is_exhausted(settings, store: Store,  # type: ignore[no-untyped-def]
                                                  tmp_path: Path) -> None:
    run = create_run(settings, store, task_id="fixture", budget="1s", baseline=False,
                     start_clock=True).run
    try:
        time.sleep(1.2)
        steps: list[Step] = [Call("read_file", {"path": "TASK.md"}), Call("budget_status"),
                             "done"]
        agent, fake = await drive(settings, store, run, steps, tmp_path)
    finally:
        finish_run(settings, store, run.id)
    assert agent.stop_reason == "budget" and len(fake.requests) == 1
    assert "budget exhausted" in tool_messages(agent)[0]["content"]


async def test_max_turns(settings, store: Store, run: Run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    steps: list[Step] = [Call("budget_status") for _ in range(5)]
    agent, fake = await drive(settings, store, run, steps, tmp_path, llm_max_turns="3")
    assert agent.stop_reason == "max_turns" and len(fake.requests) == 3
    # its own limit, which the orchestrator records as the budget's end, not its finish
    assert agent.limit_note == "turn limit: stopped after 3 turns (llm_max_turns)"


def test_connector_attributes() -> None:
    import a2rl
    from a2rl.clients.base import Connector, InProcessConnector

    c = LlmConnector()
    assert isinstance(c, Connector)
    assert (c.name, c.kind, c.experimental) == ("llm", "inprocess", False)
    assert c.installed() and c.version() == a2rl.__version__ and c.title
    missing = [m for m in dir(InProcessConnector)
               if not m.startswith("_") and not hasattr(c, m)]
    assert missing == []  # everything the in-process protocol asks for


SFT = ("python code/sft.py --base base_model --data data/train.jsonl --out output/sft "
       "--steps 150 --holdout 0")  # enough to beat the base; the default 1000 is the demo's


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_llm_agent_improves_an_arith_run(settings, store: Store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    require_bwrap()
    run = create_run(settings, store, task_id="arith", budget="30m", start_clock=True).run
    steps: list[Step] = [
        Call("read_file", {"path": "TASK.md"}),
        Call("edit_file", {"path": "code/sft.py", "new_text": script("sft.py")}),
        Call("run_command", {"command": SFT, "wait_s": 5}),
        Poll(Call("job_status", lambda m: {"job_id": latest(m, "job_id"), "wait_s": 30}),
             until=lambda text: json_field(text, "state") not in (None, "running")),
        Call("submit_checkpoint", {"path": "output/sft", "note": "SFT"}),
        Poll(Call("get_score", lambda m: {"submission_id": latest(m, "submission_id"),
                                          "wait_s": 60}),
             until=lambda text: json_field(text, "status") not in ("queued", "grading")),
        "done",
    ]
    agent = LlmConnector()
    try:
        with FakeOpenAI(steps) as fake:
            async with Client(build_server(settings, store, run_id=run.id, transport="memory"),
                              mode="legacy") as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                await agent.run(client, context(run, tmp_path, fake.base_url))
    finally:
        done = finish_run(settings, store, run.id)
    assert not fake.errors, fake.errors[0]
    assert agent.stop_reason == "done" and not fake.overrun
    job = [m["content"] for m in tool_messages(agent)
           if json_field(m["content"], "state") not in (None, "running")]
    assert job and json_field(job[-1], "state") == "exited", job[-1][:2000]
    offered = {t["function"]["name"] for t in fake.requests[0]["tools"]}
    assert offered == tools and len(fake.requests[0]["tools"]) == len(tools)
    assert all(t["function"]["parameters"]["type"] == "object" for t in fake.requests[0]["tools"])
    assert len(calls(store, run.id)) == len(fake.issued)
    assert [c.tool for c in calls(store, run.id)] == [c["name"] for c in fake.issued]
    assert agent.transcript and agent.transcript[-1]["kind"] == "stop"
    assert done.final_score is not None and run.baseline_test is not None
    assert done.final_score > run.baseline_test, (done.final_score, run.baseline_test)
