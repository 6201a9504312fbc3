# ruff: noqa: E501
"""A fixture RD-Agent wheel: the layout and code shapes of rdagent 1.0.0's autorl_bench
(`benchmarks/webshop/eval.py`: `_vllm_sys_msg` in `create_llm_fn`, `build_react_prompt`'s
f-string `prompt`; `benchmarks/deepsearchqa/eval.py`: `REACT_SYSTEM_PROMPT`, `_judge_answer`'s
`judge_prompt` and `system_prompt=`), holding our own placeholder prompts. The real wheel's
prompts belong to RD-Agent and are read only on a user's machine (`a2rl.tasks.rdagent.DOWNLOAD`),
or by the tests that require it (tests/harness_wheels.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

WEBSHOP = '''
from typing import Callable, List, Tuple


def create_llm_fn(backend: str, model_path: str, **kwargs) -> Tuple[Callable, Callable]:
    if backend == "vllm":
        _vllm_sys_msg = (
            "Fixture shopper. "
            "Reply with one action."
        )
        return _vllm_sys_msg, None
    raise ValueError(backend)


def build_react_prompt(
    instruction: str,
    history: List[Tuple[str, str]],
    observation: str,
    available_actions: str = "",
    history_window: int = 5,
) -> str:
    prompt = f"""Fixture shop {{braces}}.

Instruction: {instruction}

Choices:
{available_actions}

Go:
"""
    return prompt
'''

DEEPSEARCHQA = '''
REACT_SYSTEM_PROMPT = """Fixture researcher.
Thought: then Action: search[...] or Action: answer[...]
"""


class DeepSearchQAEvaluator:
    def _judge_answer(self, predicted: str, gold: str, answer_type: str) -> bool:
        judge_prompt = f"""Fixture judge ({answer_type}).
        Gold: {gold}
        Predicted: {predicted}
        Say correct or incorrect."""
        return APIBackend().build_messages_and_create_chat_completion(
            user_prompt=judge_prompt,
            system_prompt="Fixture strict judge.",
        )
'''

BENCH = "rdagent/scenarios/rl/autorl_bench/benchmarks"


def build_wheel(folder: Path) -> Path:
    """Write the fixture wheel into `folder` and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "rdagent-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{BENCH}/webshop/eval.py", WEBSHOP)
        zf.writestr(f"{BENCH}/deepsearchqa/eval.py", DEEPSEARCHQA)
    return wheel
