"""GSM8K as the reference harness evaluates it (the `paper` profile).

The harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/__init__.py)
runs OpenCompass 0.5.1's `opencompass.configs.datasets.gsm8k.gsm8k_gen_1d7fe4` with the model
type VLLMwithChatTemplate (rdagent/components/benchmark/configs/opencompass_template.yaml),
greedy (models.yaml `default`: temperature 0, top_k 1), on the whole test split (test_range
`[:]`). That config is a 4-shot chain-of-thought prompt in chat form (read at run time from
the OpenCompass wheel: `a2rl.tasks.opencompass`), GenInferencer max_out_len 512.

Scoring, reproduced here because OpenCompass cannot be installed beside our pins (its
`datasets<4`, `numpy<2`), from OpenCompass 0.5.1:
- the model's pred_postprocessor `extract-non-reasoning-content` (models.yaml `default`:
  use_cot_postprocessor true), in `a2rl.tasks.opencompass`;
- the dataset's pred_postprocessor `gsm8k_postprocess` and dataset_postprocessor
  `gsm8k_dataset_postprocess`, and `Gsm8kEvaluator.is_equal`, opencompass/datasets/gsm8k.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..opencompass import VERSION, extract_non_reasoning_content
from ..scorers.match import AnswerMatch
from .scoring import refusal

#: The config the harness names (benchmarks/__init__.py: eval_config["dataset"]).
CONFIG = ("gsm8k", "gsm8k_gen_1d7fe4")
#: Its prompt's input column.
COLUMN = "question"
NULL = "NULL"


def gsm8k_postprocess(text: str) -> str:
    """OpenCompass `gsm8k_postprocess`: the last number before the first `Question:`."""
    text = text.split("Question:")[0]
    numbers = re.findall(r"\-?\d+\.\d+|\-?\d+", text)
    if not numbers:
        return NULL
    return numbers[-1]


def gsm8k_dataset_postprocess(answer: str) -> str:
    """OpenCompass `gsm8k_dataset_postprocess`: the reference after `#### `, commas dropped."""
    return answer.split("#### ")[1].replace(",", "")


def is_equal(pred: str, refer: str) -> bool:
    """OpenCompass `Gsm8kEvaluator.is_equal`: equal strings, or |float(pred) - int(refer)| <
    1e-6 (an error in either conversion counts as unequal)."""
    try:
        if pred == refer or abs(float(pred) - int(refer)) < 1e-6:
            return True
    except Exception:  # noqa: BLE001 - the evaluator's own rule: any failure is "unequal"
        pass
    return False


def paper_answer(output: str) -> str:
    """The prediction OpenCompass scores: model postprocessor, then the dataset's."""
    return gsm8k_postprocess(extract_non_reasoning_content(output))


def _audit_metrics(items: Sequence[dict[str, Any]], outputs: Sequence[str]) -> dict[str, Any]:
    # The harness's rule is kept (docs/paper-fidelity.md): it reads one number, the last, so a
    # spam or a hedge earns only what that one number would; the shapes our profile refuses
    # are counted for the audit, never changing a verdict.
    return {"n_refusable_shapes": sum(refusal(o) is not None for o in outputs),
            "scorer": f"opencompass {VERSION} gsm8k_postprocess + Gsm8kEvaluator"}


#: OpenCompass's GSM8K accuracy: postprocess, then `is_equal` (the `paper` profile's scorer).
SCORER = AnswerMatch(parse=paper_answer, expected="target", equal=is_equal, unparsed=NULL,
                     metrics=_audit_metrics)
