# ruff: noqa: E501
"""A fixture OpenCompass wheel: the layout and config syntax of OpenCompass 0.5.1's dataset
configs (`opencompass/configs/datasets/<name>/<config>.py`, `dict(role=..., prompt=...)`
rounds, `read_base()` re-exports), holding our own placeholder prompts. The real wheel's
prompts belong to OpenCompass and are read only on a user's machine
(`a2rl.tasks.opencompass.DOWNLOAD`)."""

from __future__ import annotations

import zipfile
from pathlib import Path

GSM8K = '''from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import ZeroRetriever
from opencompass.openicl.icl_inferencer import GenInferencer
from opencompass.datasets import GSM8KDataset, gsm8k_postprocess

gsm8k_reader_cfg = dict(input_columns=['question'], output_column='answer')

gsm8k_infer_cfg = dict(
    prompt_template=dict(
        type=PromptTemplate,
        template=dict(
            round=[
                dict(role='HUMAN', prompt="Question: Ann has 2 pens and buys 3. How many?\\nLet's think step by step\\nAnswer:"),
                dict(role='BOT', prompt='2 + 3 = 5\\nThe answer is 5\\n'),
                dict(role='HUMAN', prompt="Question: Bo has {10} coins and loses 4. How many?\\nLet's think step by step\\nAnswer:"),
                dict(role='BOT', prompt='10 - 4 = 6\\nThe answer is 6\\n'),
                dict(role='HUMAN', prompt="Question: {question}\\nLet's think step by step\\nAnswer:"),
            ],
        )),
    retriever=dict(type=ZeroRetriever),
    inferencer=dict(type=GenInferencer, max_out_len=512))

gsm8k_datasets = [dict(abbr='gsm8k', type=GSM8KDataset, path='opencompass/gsm8k',
                       reader_cfg=gsm8k_reader_cfg, infer_cfg=gsm8k_infer_cfg)]
'''

HUMANEVAL_GEN = '''from mmengine.config import read_base

with read_base():
    from .humaneval_openai_sample_evals_gen_dcae0e import humaneval_datasets  # noqa: F401, F403
'''

HUMANEVAL_SAMPLE = '''from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_inferencer import GenInferencer

humaneval_infer_cfg = dict(
    prompt_template=dict(
        type=PromptTemplate,
        template=dict(round=[
            dict(
                role='HUMAN',
                prompt='Write this function completely.\\n{prompt}'),
        ])),
    inferencer=dict(type=GenInferencer))
'''

PLACEHOLDER_INSTRUCTION = "Write this function completely.\n"


def build_wheel(folder: Path) -> Path:
    """Write the fixture wheel into `folder` and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "opencompass-0.5.1-py3-none-any.whl"
    base = "opencompass/configs/datasets"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{base}/gsm8k/gsm8k_gen_1d7fe4.py", GSM8K)
        zf.writestr(f"{base}/humaneval/humaneval_gen.py", HUMANEVAL_GEN)
        zf.writestr(f"{base}/humaneval/humaneval_openai_sample_evals_gen_dcae0e.py",
                    HUMANEVAL_SAMPLE)
    return wheel
