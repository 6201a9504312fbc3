"""`VllmEngine`: offline batch generation with vLLM, when it is installed.

Why: vLLM batches continuously and replays CUDA graphs, the fastest greedy generation available
on a GPU (issue 10's target: 20,000 tokens/s on the Qwen2.5-1.5B shape). It is optional: vLLM
cannot be installed everywhere (not on the CPU build machines), so nothing imports it at module
level and `engine_select` picks it only when it is importable and CUDA is present.

The model is loaded once per evaluation process (the grader runs one evaluation per process,
see `grading/worker.py`). Prompts are rendered and tokenized by the same transformers tokenizer
as `TransformersEngine` and passed as token ids; completions are decoded by the same function,
so the text that is scored is built identically whichever engine produced the tokens. The
tokenizer is the base model's and the checkpoint's generation_config.json is ignored, as in
`engine.TransformersEngine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .engine import (
    Prompt,
    decode_completion,
    end_of_sequence_ids,
    load_tokenizer,
    release_model,
    render_prompt,
)


def vllm_engine_version() -> str:
    import torch
    import vllm

    return f"vllm {vllm.__version__}, torch {torch.__version__}"


class VllmEngine:
    """Greedy `vllm.LLM.generate` on token ids; `gpu_memory_utilization` is the fraction of the
    device it may take (the grader sizes it from the free memory it measured)."""

    engine_name = "vllm"

    def __init__(
        self,
        model_dir: Path,
        *,
        chat_template: str | None = None,
        tokenizer_dir: Path | None = None,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        ignore_eos: bool = False,
    ) -> None:
        import vllm

        self.engine_version = vllm_engine_version()
        tokenizer_dir = tokenizer_dir or model_dir
        self.tokenizer: Any = load_tokenizer(tokenizer_dir, chat_template)
        self.ignore_eos = ignore_eos  # the benchmark forces full-length generations
        # the base's end of sequence, as `TransformersEngine` stops (vLLM itself would stop at
        # the tokenizer's only, since the checkpoint's generation_config.json is ignored)
        self.stop_token_ids = end_of_sequence_ids(self.tokenizer, tokenizer_dir)
        # generation_config="vllm": vLLM's defaults, never the checkpoint's
        # generation_config.json (see `engine.greedy_config`); the sampling parameters below
        # are the whole of the generation settings
        self.model: Any = vllm.LLM(
            model=str(model_dir), tokenizer=str(tokenizer_dir), dtype="bfloat16", seed=0,
            generation_config="vllm",
            trust_remote_code=False, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len)

    def generate(
        self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = ()
    ) -> list[str]:
        import vllm

        token_ids = [self.tokenizer(render_prompt(self.tokenizer, p),
                                    add_special_tokens=False)["input_ids"] for p in prompts]
        params = vllm.SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, stop=list(stop) or None,
            include_stop_str_in_output=True, skip_special_tokens=False,
            ignore_eos=self.ignore_eos,
            stop_token_ids=None if self.ignore_eos else self.stop_token_ids)
        results = self.model.generate([{"prompt_token_ids": ids} for ids in token_ids],
                                      params, use_tqdm=False)
        return [decode_completion(self.tokenizer, list(r.outputs[0].token_ids), stop)
                for r in results]

    def close(self) -> None:
        """Drop the engine. vLLM does not always return all device memory while its process
        lives; the grader's guarantee is the process: one evaluation per worker process."""
        release_model(self)
