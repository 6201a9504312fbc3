"""OpenCompass's dataset configs, read from its wheel at run time (the `paper` profile).

Why read a wheel instead of installing OpenCompass: the reference harness evaluates GSM8K and
HumanEval with OpenCompass 0.5.1 (autorl_bench/requirements.txt: `opencompass==0.5.1`), but
OpenCompass requires `datasets<4` and `numpy<2`, outside our pinned set (datasets 5.2), so it
cannot be a dependency. Its prompts (GSM8K's four worked examples, HumanEval's instruction)
belong to OpenCompass and are not copied into a2rl: the user downloads the wheel once,

    pip download opencompass==0.5.1 --no-deps --only-binary=:all: -d "$A2RL_HOME/opencompass"

and we read the config files out of the zip (checked against `WHEEL_SHA256`), parsing them with
`ast` (never executing them). The postprocessors the configs name are a few lines each; they
are reproduced in `a2rl.tasks.gsm8k.paper` and `a2rl.tasks.humaneval.paper`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from a2rl.settings import Settings

from .wheels import Wheel
from .wheels import read_member as _read

VERSION = "0.5.1"
#: SHA-256 of the wheel as the package index serves it.
WHEEL_SHA256 = "c047ceb957bf93154cc3ebef79e93f100bbdbbdf1cd157bab6e6efb41f1954da"
CONFIGS = "opencompass/configs/datasets"

#: OpenCompass's role names -> chat roles (models/huggingface_above_v4_33.py:
#: `_convert_chat_messages`, used by VLLMwithChatTemplate, the harness's model type).
ROLES = {"HUMAN": "user", "BOT": "assistant", "SYSTEM": "system"}


class OpenCompassUnavailable(RuntimeError):
    """The OpenCompass wheel is missing, altered, or lacks the config asked for."""


OPENCOMPASS = Wheel(package="opencompass", version=VERSION, sha256=WHEEL_SHA256,
                    label="OpenCompass", what="the prompts", unavailable=OpenCompassUnavailable)
WHEEL = OPENCOMPASS.filename
DOWNLOAD = OPENCOMPASS.download


@dataclass(frozen=True)
class GenConfig:
    """What the `paper` profile needs from one `*_gen_*` dataset config."""

    rounds: tuple[tuple[str, str], ...]  # (chat role, prompt text); the last holds `{column}`
    max_out_len: int | None  # the GenInferencer's, when the config sets it


def default_wheel(settings: Settings) -> Path:
    return OPENCOMPASS.default_path(settings)


def read_member(wheel: Path, member: str, expect_sha256: str | None = WHEEL_SHA256) -> str:
    """The text of `member` inside the wheel (after checking the wheel's digest; None: a test
    fixture, not checked)."""
    return _read(OPENCOMPASS, wheel, member, expect_sha256)


def _dict_call(node: ast.AST) -> dict[str, ast.expr] | None:
    """The keywords of a `dict(...)` call node, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "dict"):
        return {kw.arg: kw.value for kw in node.keywords if kw.arg}
    return None


def parse_gen_config(source: str) -> GenConfig | None:
    """The prompt rounds and max_out_len of a config's `*_infer_cfg`, or None when the file
    has none (it re-exports another config: see `load_gen_config`). Only literals are read."""
    for stmt in ast.parse(source).body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id.endswith("_infer_cfg")):
            continue
        found: list[tuple[int, int, str, str]] = []
        max_out_len: int | None = None
        for node in ast.walk(stmt.value):
            kw = _dict_call(node)
            if kw is None:
                continue
            role, prompt = kw.get("role"), kw.get("prompt")
            if isinstance(role, ast.Constant) and isinstance(prompt, ast.Constant):
                found.append((node.lineno, node.col_offset, ROLES[role.value],
                              str(prompt.value)))
            limit = kw.get("max_out_len")
            if isinstance(limit, ast.Constant):
                max_out_len = int(limit.value)
        found.sort()  # ast.walk is breadth-first: put the rounds back in source order
        return GenConfig(rounds=tuple((r, p) for _, _, r, p in found), max_out_len=max_out_len)
    return None


def _reexported(source: str) -> str | None:
    """The module a config re-exports (`from .other import x_datasets` in `read_base()`)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            return node.module
    return None


def load_gen_config(wheel: Path, dataset: str, name: str,
                    expect_sha256: str | None = WHEEL_SHA256) -> GenConfig:
    """The config `opencompass.configs.datasets.<dataset>.<name>`, following re-exports (as
    `humaneval_gen` re-exports `humaneval_openai_sample_evals_gen_dcae0e`)."""
    for _ in range(4):
        source = read_member(wheel, f"{CONFIGS}/{dataset}/{name}.py", expect_sha256)
        config = parse_gen_config(source)
        if config is not None and config.rounds:
            return config
        nxt = _reexported(source)
        if nxt is None:
            break
        name = nxt
    raise OpenCompassUnavailable(f"{dataset}/{name}: no prompt template found in {wheel.name}")


def gen_config(config: tuple[str, str], settings: Settings,
               wheel: Path | None = None) -> GenConfig:
    """The config `(dataset, name)` a task's paper profile prompts with: from `wheel`,
    unchecked (tests give a fixture wheel in the same layout), else from the downloaded one in
    $A2RL_HOME, digest-checked."""
    if wheel is not None:
        return load_gen_config(wheel, *config, expect_sha256=None)
    return load_gen_config(default_wheel(settings), *config, expect_sha256=WHEEL_SHA256)


def render(config: GenConfig, column: str, value: str) -> list[dict[str, str]]:
    """The chat messages of one item: OpenCompass's PromptTemplate puts the input column's
    value in place of `{column}` by plain replacement (utils/prompt.py `safe_format`: other
    braces stay); VLLMwithChatTemplate maps roles and merges consecutive messages of one role
    with a newline (models/huggingface_above_v4_33.py `_convert_chat_messages`). Its default
    meta template (`_get_meta_template`) puts an empty SYSTEM slot, sent as the human's, after
    every HUMAN prompt, and `APITemplateParser.parse_template` merges it in with a newline: so
    every user turn ends with one more newline than the config's text."""
    messages: list[dict[str, str]] = []
    for role, prompt in config.rounds:
        text = prompt.replace("{" + column + "}", value)
        if role == ROLES["HUMAN"]:
            text += "\n"
        if not text:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += "\n" + text
        else:
            messages.append({"role": role, "content": text})
    return messages


def extract_non_reasoning_content(text: str, think_start_token: str = "<think>",
                                  think_end_token: str = "</think>") -> str:
    """OpenCompass 0.5.1 `extract_non_reasoning_content` (opencompass/utils/
    text_postprocessors.py), the harness models' pred_postprocessor (RD-Agent
    rdagent/components/benchmark/configs/models.yaml `default`: use_cot_postprocessor true):
    drop `<think>...</think>` spans (or all up to a lone end tag), then strip."""
    if think_start_token not in text and think_end_token in text:
        return text.split(think_end_token)[-1].strip()
    reasoning = re.compile(rf"{think_start_token}(.*?){think_end_token}", re.DOTALL)
    return reasoning.sub("", text).strip()
