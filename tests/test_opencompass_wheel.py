"""GSM8K's and HumanEval's `paper` profile against the real OpenCompass 0.5.1 wheel.

The wheel is read, never installed (OpenCompass's dependencies are outside our pins): the
postprocessors and the evaluator's `is_equal` are taken from its source files with `ast` and run
without their registry decorators; the dataset configs are run with their imports replaced by
placeholders. Our reproductions must give what these give, on the extraction tables of
tests/test_task_gsm8k.py and tests/test_task_humaneval.py and on generated outputs, and our
prompt building must equal the configs' rounds. A user without the wheel skips (CI fails);
`make test` fetches it (tests/harness_wheels.py).
"""

from __future__ import annotations

import ast
import random
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest

from a2rl.settings import Settings
from a2rl.tasks import opencompass as oc
from a2rl.tasks.gsm8k import paper as gsm8k_paper
from a2rl.tasks.gsm8k.task import GSM8KTask
from a2rl.tasks.humaneval import paper as humaneval_paper

from .harness_wheels import require_wheel
from .test_task_gsm8k import FIXTURE as GSM8K_FIXTURE
from .test_task_gsm8k import PAPER_TABLE
from .test_task_humaneval import POSTPROCESS_TABLE


@pytest.fixture(scope="module")
def wheel() -> Path:
    return require_wheel(oc.OPENCOMPASS)


def _source(wheel: Path, member: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(member).decode()


def _definitions(source: str, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """The module-level functions and classes `names` of a source, run without their
    decorators (OpenCompass's registries) in `namespace`."""
    tree = ast.parse(source)
    body = [node for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names]
    assert {n.name for n in body} == names  # type: ignore[attr-defined]
    for node in body:
        node.decorator_list = []  # type: ignore[attr-defined]
    exec(compile(ast.Module(body=body, type_ignores=[]), "<opencompass>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def theirs(wheel: Path) -> dict[str, Any]:
    """OpenCompass 0.5.1's own functions, out of its wheel."""
    ns: dict[str, Any] = {"re": re, "BaseEvaluator": object}
    _definitions(_source(wheel, "opencompass/datasets/gsm8k.py"),
                 {"gsm8k_postprocess", "gsm8k_dataset_postprocess", "Gsm8kEvaluator"}, ns)
    _definitions(_source(wheel, "opencompass/datasets/humaneval.py"),
                 {"humaneval_postprocess_v2"}, ns)
    _definitions(_source(wheel, "opencompass/utils/text_postprocessors.py"),
                 {"extract_non_reasoning_content"}, ns)
    return ns


def _outputs(seed: int, n: int) -> list[str]:
    """Generated model outputs mixing the pieces the postprocessors react to."""
    rng = random.Random(seed)
    pieces = ["The answer is ", "-", "3", "12.5", "1,000", " dollars", "\n", "Question: ",
              "<think>", "</think>", "```python\n", "```\n", "    return x\n", "#### ", ".",
              "Answer: 7", " and 0.25", "$", "x"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def test_gsm8k_extraction_equals_opencompass(theirs: dict[str, Any]) -> None:
    evaluator = theirs["Gsm8kEvaluator"]()
    for output, pred, reference, equal in PAPER_TABLE:
        theirs_pred = theirs["gsm8k_postprocess"](theirs["extract_non_reasoning_content"](output))
        assert theirs_pred == pred == gsm8k_paper.paper_answer(output), output
        assert evaluator.is_equal(pred, reference) is equal is gsm8k_paper.is_equal(pred,
                                                                                    reference)
    for output in _outputs(1, 400):
        expected = theirs["gsm8k_postprocess"](theirs["extract_non_reasoning_content"](output))
        assert gsm8k_paper.paper_answer(output) == expected, output
        for reference in ("3", "12", "-3", "1000", "7"):
            assert gsm8k_paper.is_equal(expected, reference) is evaluator.is_equal(expected,
                                                                                   reference)
    for answer in ("x <<1+2=3>>3\n#### 1,234", "#### 7", "a\n#### -12"):
        assert gsm8k_paper.gsm8k_dataset_postprocess(answer) == theirs[
            "gsm8k_dataset_postprocess"](answer)


def test_humaneval_postprocess_equals_opencompass(theirs: dict[str, Any]) -> None:
    for output, completion in POSTPROCESS_TABLE:
        expected = theirs["humaneval_postprocess_v2"](
            theirs["extract_non_reasoning_content"](output))
        assert expected == completion == humaneval_paper.paper_completion(output), output
    for output in _outputs(2, 400):
        expected = theirs["humaneval_postprocess_v2"](
            theirs["extract_non_reasoning_content"](output))
        assert humaneval_paper.paper_completion(output) == expected, output


def _config(source: str, name: str) -> dict[str, Any]:
    """A dataset config run with each imported name bound to a placeholder: its dicts."""
    tree = ast.parse(source)
    ns: dict[str, Any] = {"__name__": "config"}
    body = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                ns[alias.asname or alias.name] = f"<{alias.name}>"
        else:
            body.append(node)
    exec(compile(ast.Module(body=body, type_ignores=[]), "<config>", "exec"), ns)
    return ns[name]


def _rounds(infer_cfg: dict[str, Any]) -> tuple[tuple[tuple[str, str], ...], int | None]:
    rounds = infer_cfg["prompt_template"]["template"]["round"]
    return (tuple((oc.ROLES[r["role"]], r["prompt"]) for r in rounds),
            infer_cfg["inferencer"].get("max_out_len"))


def test_prompt_building_equals_the_configs(wheel: Path, tmp_path: Path) -> None:
    base = oc.CONFIGS
    gsm8k_cfg = _config(_source(wheel, f"{base}/gsm8k/gsm8k_gen_1d7fe4.py"), "gsm8k_infer_cfg")
    ours = oc.load_gen_config(wheel, *gsm8k_paper.CONFIG)  # digest-checked
    assert (ours.rounds, ours.max_out_len) == _rounds(gsm8k_cfg)
    assert len(ours.rounds) == 9 and ours.max_out_len == 512  # four worked examples, then it
    # humaneval_gen re-exports the config the harness then runs
    gen = _source(wheel, f"{base}/humaneval/humaneval_gen.py")
    assert "humaneval_openai_sample_evals_gen_dcae0e" in gen
    sample = f"{base}/humaneval/humaneval_openai_sample_evals_gen_dcae0e.py"
    he_cfg = _config(_source(wheel, sample), "humaneval_infer_cfg")
    ours_he = oc.load_gen_config(wheel, *humaneval_paper.CONFIG)
    assert (ours_he.rounds, ours_he.max_out_len) == _rounds(he_cfg)
    # the task's chat for a test item: the config's rounds, `{question}` filled by value
    task = GSM8KTask(data_dir=GSM8K_FIXTURE, opencompass_wheel=wheel).with_profile("paper")
    item = task.load_split("test", Settings(home=tmp_path))[0]
    chat = task.build_prompt(item)
    expected = [{"role": role, "content": text.replace("{question}", item["question"])}
                for role, text in _rounds(gsm8k_cfg)[0]]
    assert chat == expected
