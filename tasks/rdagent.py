"""The reference harness's own prompt text, read from RD-Agent's wheel at run time (the `paper`
profile of WebShop and DeepSearchQA).

The harness is microsoft/RD-Agent's `rdagent/scenarios/rl/autorl_bench`; PyPI's `rdagent`
1.0.0 wheel ships it unchanged from the repository (benchmarks/webshop/eval.py and
benchmarks/deepsearchqa/eval.py are byte-identical to the repository's at 471eb30d). Its
prompts are RD-Agent's text, so a2rl neither copies them nor installs RD-Agent (which would
pull its whole dependency tree): the user downloads the wheel once,

    pip download rdagent==1.0.0 --no-deps --only-binary=:all: -d "$A2RL_HOME/rdagent"

and a2rl reads the two files out of it (digest-checked, `wheels.py`), taking each prompt from
the assignment that holds it in the harness's code with `ast` (never executed):

- WebShop (`create_llm_fn`, `build_react_prompt`): the system message `_vllm_sys_msg` and the
  head of the user prompt (the f-string assigned to `prompt`, over `instruction` and
  `available_actions`);
- DeepSearchQA: `REACT_SYSTEM_PROMPT`, and `_judge_answer`'s judge prompt (over `answer_type`,
  `gold` and `predicted`) with its system prompt.

The rest of each format (numbered `Observation k:`/`Action k:` lines, the available actions
list, the `Thought:`/`Action:` loop) is structure, reproduced in `tasks/webshop/paper.py` and
`tasks/deepsearchqa/paper.py` with the harness's lines cited; tests check both against the
harness's own functions from the real wheel.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Formatter

from a2rl.settings import Settings

from .wheels import Wheel

VERSION = "1.0.0"
WHEEL_SHA256 = "8b92797b282910e14831fff8f48f3b67032c4d9aca349e3e90f82ccbfebc0e52"
BENCH = "rdagent/scenarios/rl/autorl_bench/benchmarks"
WEBSHOP_EVAL = f"{BENCH}/webshop/eval.py"
DEEPSEARCHQA_EVAL = f"{BENCH}/deepsearchqa/eval.py"


class HarnessUnavailable(RuntimeError):
    """RD-Agent's wheel is missing or altered, or lacks a prompt a2rl reads from it."""


RDAGENT = Wheel(package="rdagent", version=VERSION, sha256=WHEEL_SHA256, label="RD-Agent",
                what="the reference harness's prompts", unavailable=HarnessUnavailable)
DOWNLOAD = RDAGENT.download


def default_wheel(settings: Settings) -> Path:
    return RDAGENT.default_path(settings)


@dataclass(frozen=True)
class WebShopText:
    """benchmarks/webshop/eval.py's prompt text."""

    system: str  # `_vllm_sys_msg`: the system message of every step
    #: `build_react_prompt`'s head, a str.format template over {instruction}, {available_actions}
    prompt: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class DeepSearchQAText:
    """benchmarks/deepsearchqa/eval.py's prompt text."""

    system: str  # `REACT_SYSTEM_PROMPT`, the head of every episode's raw prompt
    judge: str  # `_judge_answer`'s prompt, a template: {answer_type}, {gold}, {predicted}
    judge_system: str  # its system prompt

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def template_of(node: ast.expr, fields: set[str]) -> str:
    """A `str.format` template equal to a string literal or an f-string whose replacement
    fields are the bare names `fields` (no conversion, no format spec): literal braces
    doubled, `{name}` for each field."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if not isinstance(node, ast.JoinedStr):
        raise HarnessUnavailable(f"line {node.lineno}: not a string literal or an f-string")
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value).replace("{", "{{").replace("}", "}}"))
        elif (isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name)
              and value.value.id in fields and value.conversion == -1
              and value.format_spec is None):
            parts.append("{" + value.value.id + "}")
        else:
            raise HarnessUnavailable(f"line {node.lineno}: an f-string field other than "
                                     f"{', '.join(sorted(fields))}")
    return "".join(parts)


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in Formatter().parse(template) if name}


def _assigned(tree: ast.AST, name: str, where: str) -> ast.expr:
    """The value first assigned to `name` anywhere in `tree`."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            return node.value
    raise HarnessUnavailable(f"{where}: no assignment to {name}")


def _function(tree: ast.AST, name: str, where: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise HarnessUnavailable(f"{where}: no function {name}")


def _literal(node: ast.expr, where: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise HarnessUnavailable(f"{where} line {node.lineno}: not a string literal")


def _checked(template: str, fields: set[str], where: str) -> str:
    if _fields(template) != fields:
        raise HarnessUnavailable(f"{where}: the prompt's fields are {sorted(_fields(template))}, "
                                 f"not {sorted(fields)}")
    return template


def parse_webshop(source: str) -> WebShopText:
    """The WebShop prompt text of benchmarks/webshop/eval.py's source."""
    tree = ast.parse(source)
    fields = {"instruction", "available_actions"}
    head = template_of(_assigned(_function(tree, "build_react_prompt", WEBSHOP_EVAL), "prompt",
                                 WEBSHOP_EVAL), fields)
    system = _literal(_assigned(_function(tree, "create_llm_fn", WEBSHOP_EVAL),
                                "_vllm_sys_msg", WEBSHOP_EVAL), WEBSHOP_EVAL)
    return WebShopText(system=system, prompt=_checked(head, fields, WEBSHOP_EVAL))


def parse_deepsearchqa(source: str) -> DeepSearchQAText:
    """The DeepSearchQA prompt text of benchmarks/deepsearchqa/eval.py's source."""
    tree = ast.parse(source)
    system = _literal(_assigned(tree, "REACT_SYSTEM_PROMPT", DEEPSEARCHQA_EVAL),
                      DEEPSEARCHQA_EVAL)
    judge_fn = _function(tree, "_judge_answer", DEEPSEARCHQA_EVAL)
    fields = {"answer_type", "gold", "predicted"}
    judge = template_of(_assigned(judge_fn, "judge_prompt", DEEPSEARCHQA_EVAL), fields)
    judge_system = None
    for node in ast.walk(judge_fn):
        if isinstance(node, ast.keyword) and node.arg == "system_prompt":
            judge_system = _literal(node.value, DEEPSEARCHQA_EVAL)
    if judge_system is None:
        raise HarnessUnavailable(f"{DEEPSEARCHQA_EVAL}: _judge_answer sets no system_prompt")
    return DeepSearchQAText(system=system, judge=_checked(judge, fields, DEEPSEARCHQA_EVAL),
                            judge_system=judge_system)


def webshop_text(wheel: Path, *, checked: bool = True) -> WebShopText:
    """WebShop's prompt text from the wheel (`checked=False`: a test fixture's)."""
    return parse_webshop(RDAGENT.read(wheel, WEBSHOP_EVAL, checked=checked))


def deepsearchqa_text(wheel: Path, *, checked: bool = True) -> DeepSearchQAText:
    """DeepSearchQA's prompt text from the wheel (`checked=False`: a test fixture's)."""
    return parse_deepsearchqa(RDAGENT.read(wheel, DEEPSEARCHQA_EVAL, checked=checked))


def source_of(wheel: Path, member: str, *, checked: bool = True) -> str:
    """A harness file's source (the tests run its functions against ours)."""
    return RDAGENT.read(wheel, member, checked=checked)
