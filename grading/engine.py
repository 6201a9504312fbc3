"""Generation engines: how the grader turns prompts into outputs.

A small `GenerationEngine` protocol so a faster engine (vLLM, compiled transformers on a GPU)
can replace the plain transformers one without touching scoring. Every engine is greedy and
batched, so a score is a deterministic function of the checkpoint and the prompts, and reports
`engine_name` / `engine_version` for provenance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

Messages = list[dict[str, str]]
Prompt = str | Messages


@runtime_checkable
class GenerationEngine(Protocol):
    engine_name: str
    engine_version: str

    def generate(
        self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = ()
    ) -> list[str]:
        """Greedy completions, one per prompt, in order, each cut at its first stop string."""
        ...


def transformers_engine_version() -> str:
    """The provenance string of `TransformersEngine`, without loading a model."""
    import torch
    import transformers

    return f"transformers {transformers.__version__}, torch {torch.__version__}"


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


class TransformersEngine:
    """Plain `model.generate`: left-padded batches, greedy, prompts sorted by length.

    A string prompt becomes one user message when the tokenizer has a chat template (and is
    used raw otherwise); a list of messages is always rendered with the template.
    `chat_template` overrides the checkpoint's own template: the grader passes the base model's
    so that every submission is prompted exactly as TASK.md says.
    """

    engine_name = "transformers"

    def __init__(
        self,
        model_dir: Path,
        *,
        device: str | None = None,
        batch_size: int = 64,
        chat_template: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.engine_version = transformers_engine_version()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
        if chat_template is not None:
            self.tokenizer.chat_template = chat_template
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model: Any = AutoModelForCausalLM.from_pretrained(
            model_dir, trust_remote_code=False, dtype=dtype).to(self.device)
        self.model.eval()
        self.batch_size = batch_size

    def render(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            if not self.tokenizer.chat_template:
                return prompt
            prompt = [{"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True,
                                                  tokenize=False)

    def generate(
        self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = ()
    ) -> list[str]:
        import torch

        texts = [self.render(p) for p in prompts]
        lengths = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        outputs: list[str] = [""] * len(texts)
        for start in range(0, len(order), self.batch_size):
            idx = order[start: start + self.batch_size]
            enc = self.tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True,
                                 add_special_tokens=False).to(self.device)
            with torch.inference_mode():
                out = self.model.generate(
                    **enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                    temperature=None, top_p=None, top_k=None,
                    pad_token_id=self.tokenizer.pad_token_id)
            new = out[:, enc["input_ids"].shape[1]:]
            for i, ids in zip(idx, new, strict=True):
                outputs[i] = self._decode(ids, stop)
        return outputs

    def _decode(self, ids: Any, stop: Sequence[str]) -> str:
        """Cut at the first stop string (special tokens such as `</s>` included), then drop any
        remaining special tokens (padding after an early end of sequence)."""
        text = cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=False), stop)
        for special in self.tokenizer.all_special_tokens:
            text = text.replace(special, "")
        return text
