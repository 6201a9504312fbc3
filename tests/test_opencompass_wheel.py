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
    # each user turn ends with the newline of OpenCompass's meta template (its own code shows
    # it: test_prompts_rendered_by_opencompass_template_code)
    expected = [{"role": role, "content": text.replace("{question}", item["question"])
                 + ("\n" if role == "user" else "")} for role, text in _rounds(gsm8k_cfg)[0]]
    assert chat == expected


# --- the prompt as OpenCompass renders it, by its own template code ---------------------------
def _opencompass_renderer(wheel: Path) -> dict[str, Any]:
    """OpenCompass 0.5.1's template code from the wheel: `PromptList`, `safe_format`,
    `_check_type_list`, `PromptTemplate`, `APITemplateParser`, `_convert_chat_messages`,
    `_get_meta_template` and `VLLMwithChatTemplate` (registry decorators dropped, imports not
    executed)."""
    import copy
    import hashlib
    import json
    import typing
    import warnings

    from .fake_vllm import SamplingParams

    ns: dict[str, Any] = {"copy": copy, "deepcopy": copy.deepcopy, "hashlib": hashlib,
                          "json": json, "warnings": warnings, "re": re, "np": None,
                          "BaseModel": object, "get_logger": lambda: None,
                          "SamplingParams": SamplingParams,  # the module's `from vllm import`
                          **{k: getattr(typing, k) for k in ("Any", "Dict", "Hashable", "List",
                                                            "Optional", "Tuple", "Union")}}
    _definitions(_source(wheel, "opencompass/utils/prompt.py"), {"safe_format", "PromptList"},
                 ns)
    _definitions(_source(wheel, "opencompass/utils/types.py"), {"_check_type_list"}, ns)
    ns["PromptType"] = Any  # the module's Union of PromptList and str, an annotation only
    _definitions(_source(wheel, "opencompass/openicl/icl_prompt_template.py"),
                 {"PromptTemplate"}, ns)
    _definitions(_source(wheel, "opencompass/models/base_api.py"), {"APITemplateParser"}, ns)
    _definitions(_source(wheel, "opencompass/models/huggingface_above_v4_33.py"),
                 {"_convert_chat_messages", "_get_meta_template"}, ns)
    _definitions(_source(wheel, "opencompass/models/vllm_with_tf_above_v4_33.py"),
                 {"VLLMwithChatTemplate"}, ns)
    return ns


def _their_prompt(ns: dict[str, Any], infer_cfg: dict[str, Any], entry: dict[str, Any],
                  output_column: str, base: Path, respond: Any,
                  monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str], str]:
    """What OpenCompass sends vLLM for `entry` (ZeroRetriever, GenInferencer): the template's
    item, parsed by the model's meta template, rendered by `VLLMwithChatTemplate.generate`
    with the model's tokenizer; and its stop words and the completion, from the fake vLLM."""
    import types

    from .fake_vllm import FakeVLLM

    template = ns["PromptTemplate"](**{k: v for k, v in infer_cfg["prompt_template"].items()
                                       if k != "type"})
    item = template.generate_item(entry, output_field=output_column,
                                  output_field_replace_token="", ice_field_replace_token="")
    parsed = ns["_get_meta_template"](None).parse_template(item, mode="gen")
    fake = FakeVLLM(respond)
    fake.install(monkeypatch)
    model = object.__new__(ns["VLLMwithChatTemplate"])
    model.logger = types.SimpleNamespace(info=lambda *a: None)
    model.model = fake.LLM(str(base), max_model_len=32768)
    model.tokenizer = model.model.get_tokenizer()
    model.generation_kwargs, model.fastchat_template = {}, None
    # the harness's template: temperature 0, top_p/top_k from its models.yaml defaults
    model.stop_words = model._get_potential_stop_words(str(base))
    (out,) = model.generate([parsed], max_out_len=infer_cfg["inferencer"].get("max_out_len",
                                                                             8192))
    return fake.calls[0][0], sorted(fake.calls[0][1]["stop"]), out


def test_prompts_rendered_by_opencompass_template_code(wheel: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The text the model sees for a GSM8K and a HumanEval item is OpenCompass's own
    rendering; GSM8K's answers agree although we stop at `Question:` and it does not."""
    from a2rl.tasks.humaneval.task import HumanEvalTask

    from .fake_vllm import ScriptedEngine
    from .qwen_shaped import ENDOFTEXT, write_model_dir

    ns = _opencompass_renderer(wheel)
    base = write_model_dir(tmp_path / "base")  # ends a sequence as Qwen2.5-1.5B does
    replies = ["She has 5.\nThe answer is 5\n\nQuestion: and then?<|im_end|>\nThe answer is 9",
               "12 - 4 = 8\nThe answer is 8<|endoftext|>Question: 3",
               "The answer is 7<|im_end|><|endoftext|>"]
    gsm8k_cfg = _config(_source(wheel, f"{oc.CONFIGS}/gsm8k/gsm8k_gen_1d7fe4.py"),
                        "gsm8k_infer_cfg")
    task = GSM8KTask(data_dir=GSM8K_FIXTURE, opencompass_wheel=wheel).with_profile("paper")
    items = task.load_split("test", Settings(home=tmp_path))[:len(replies)]
    for item, reply in zip(items, replies, strict=True):
        theirs, stop, out = _their_prompt(ns, gsm8k_cfg, {"question": item["question"],
                                                          "answer": item["answer"]},
                                          "answer", base, lambda p, r=reply: r, monkeypatch)
        engine = ScriptedEngine(base, lambda p, r=reply: r)
        (ours,) = engine.generate([task.build_prompt(item)],
                                  max_new_tokens=task.spec.grader.max_new_tokens,
                                  stop=task.spec.grader.stop)
        assert engine.prompts == [theirs]
        assert stop == [ENDOFTEXT]  # its stop words: the checkpoint's end of sequence
        assert gsm8k_paper.paper_answer(ours) == gsm8k_paper.paper_answer(out)
    he_cfg = _config(_source(wheel, f"{oc.CONFIGS}/humaneval/"
                                    "humaneval_openai_sample_evals_gen_dcae0e.py"),
                     "humaneval_infer_cfg")
    he = HumanEvalTask(opencompass_wheel=wheel).with_profile("paper")
    problem = he.load_split("test", Settings(home=tmp_path))[8]
    theirs, _, out = _their_prompt(ns, he_cfg, {"prompt": problem["code_prompt"]}, "task_id",
                                   base, lambda p: "```python\nreturn x\n```", monkeypatch)
    engine = ScriptedEngine(base, lambda p: "```python\nreturn x\n```")
    (ours,) = engine.generate([he.build_prompt(problem)],
                              max_new_tokens=he.spec.grader.max_new_tokens,
                              stop=he.spec.grader.stop)
    assert engine.prompts == [theirs] and ours == out
