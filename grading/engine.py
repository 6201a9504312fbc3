"""Generation engines: how the grader turns prompts into outputs.

A small `GenerationEngine` protocol (defined in `seam`, the interface tasks see) so a faster
engine (`engine_static.StaticCacheEngine`, `engine_vllm.VllmEngine`; chosen in
`engine_select`) can replace the plain transformers one
without touching scoring. Every engine is greedy and batched, so a score is a deterministic
function of the checkpoint and the prompts, and reports `engine_name` / `engine_version` for
provenance. Engines may have `close()` to give the device memory back before the process ends.
The prompt rendering and completion decoding below are shared, so that the scored text is
built identically whichever engine produced the tokens.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The engine's interface and prompt types are the grading seam's (what tasks see); re-exported.
from .seam import GenerationEngine, Messages, Prompt, RawText

__all__ = ["GenerationEngine", "Messages", "Prompt", "RawText", "TransformersEngine",
           "cut_at_stop", "decode_completion", "end_of_sequence_ids", "greedy_config",
           "load_tokenizer",
           "release_model", "render_prompt", "transformers_engine_version"]


def transformers_engine_version() -> str:
    """The provenance string of `TransformersEngine`, without loading a model.

    From the installed distributions' metadata, not the modules: every `a2rl create` and
    `a2rl run` computes this for the baseline cache key, and importing torch and transformers
    only to read their versions cost each of those commands about 2.5 CPU-seconds. A wheel's
    metadata version is its module's `__version__` (local label included: `2.13.0+cpu`); a
    module installed without metadata is asked itself."""
    return f"transformers {_version('transformers')}, torch {_version('torch')}"


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return str(importlib.import_module(name).__version__)


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


def load_tokenizer(model_dir: Path, chat_template: str | None = None) -> Any:
    """The tokenizer in `model_dir`, left-padding, with `chat_template` (if given) in place of
    its own, so that every engine renders and decodes a prompt identically.

    The grader passes the *base model's* folder: a submission's tokenizer pipeline (a
    normalizer or decoder that rewrites digits) must not change what is scored, and validation
    has already refused a submission whose vocabulary differs from the base's, so the base
    tokenizer reads the submitted weights' token ids exactly."""
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def render_prompt(tokenizer: Any, prompt: Prompt) -> str:
    """A string prompt becomes one user message when there is a chat template (raw otherwise);
    a list of messages is always rendered with the template; a `RawText` is sent as is."""
    if isinstance(prompt, RawText):
        return str(prompt)
    if isinstance(prompt, str):
        if not tokenizer.chat_template:
            return prompt
        prompt = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)


def decode_completion(tokenizer: Any, ids: Any, stop: Sequence[str]) -> str:
    """Cut at the first stop string (special tokens such as `</s>` included), then drop any
    remaining special tokens (padding after an early end of sequence)."""
    text = cut_at_stop(tokenizer.decode(ids, skip_special_tokens=False), stop)
    for special in tokenizer.all_special_tokens:
        text = text.replace(special, "")
    return text


def end_of_sequence_ids(tokenizer: Any, tokenizer_dir: Path | None = None) -> list[int]:
    """The ids that end a generation: the base model's, never the submission's (a checkpoint
    must not steer its own decoding; docs/paper-fidelity.md). As vLLM ends a sequence of the
    base itself: the ids of the base's generation_config.json (when `tokenizer_dir`, the
    base's folder, has one) and the tokenizer's end of sequence, in that order."""
    from transformers import GenerationConfig

    ids: list[int] = []
    if tokenizer_dir is not None and (Path(tokenizer_dir) / "generation_config.json").is_file():
        base = GenerationConfig.from_pretrained(tokenizer_dir).eos_token_id
        ids = [base] if isinstance(base, int) else list(base or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def greedy_config(tokenizer: Any, tokenizer_dir: Path | None = None) -> Any:
    """The generation settings of every grading: greedy, nothing else. Built by the grader,
    never read from the submission (its generation_config.json could set `suppress_tokens`,
    `min_new_tokens`, a repetition penalty...). The end-of-sequence ids are
    `end_of_sequence_ids`'."""
    from transformers import GenerationConfig

    eos = end_of_sequence_ids(tokenizer, tokenizer_dir)
    return GenerationConfig(do_sample=False, num_beams=1,
                            eos_token_id=eos[0] if len(eos) == 1 else eos,
                            pad_token_id=tokenizer.pad_token_id,
                            bos_token_id=tokenizer.bos_token_id)


def release_model(engine: Any) -> None:
    """Delete `engine.model` and give cached device memory back to the driver."""
    import gc

    import torch

    if getattr(engine, "model", None) is not None:
        engine.model = None
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class TransformersEngine:
    """Plain `model.generate`: left-padded batches, greedy, prompts sorted by length.

    A string prompt becomes one user message when the tokenizer has a chat template (and is
    used raw otherwise); a list of messages is always rendered with the template.
    `chat_template` overrides the checkpoint's own template: the grader passes the base model's
    so that every submission is prompted exactly as TASK.md says. `tokenizer_dir` is where the
    tokenizer comes from (the grader passes the base model's folder; default: `model_dir`).
    The generation settings are `greedy_config`'s, whatever the checkpoint's
    generation_config.json says.
    """

    engine_name = "transformers"

    def __init__(
        self,
        model_dir: Path,
        *,
        device: str | None = None,
        batch_size: int = 64,
        chat_template: str | None = None,
        tokenizer_dir: Path | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.engine_version = transformers_engine_version()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.tokenizer: Any = load_tokenizer(tokenizer_dir or model_dir, chat_template)
        self.model: Any = AutoModelForCausalLM.from_pretrained(
            model_dir, trust_remote_code=False, dtype=dtype).to(self.device)
        self.model.eval()
        self.generation_config = greedy_config(self.tokenizer, tokenizer_dir)
        self.model.generation_config = self.generation_config  # the checkpoint's is dropped
        self.batch_size = batch_size

    def render(self, prompt: Prompt) -> str:
        return render_prompt(self.tokenizer, prompt)

    def generate(
        self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = ()
    ) -> list[str]:
        import torch

        texts = [self.render(p) for p in prompts]
        lengths = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        outputs: list[str] = [""] * len(texts)
        self._before_batches(max(lengths, default=0), max_new_tokens)
        for start in range(0, len(order), self.batch_size):
            idx = order[start: start + self.batch_size]
            enc = self._encode([texts[i] for i in idx], max(lengths[i] for i in idx),
                               max_new_tokens)
            with torch.inference_mode():
                out = self.model.generate(
                    **enc, generation_config=self.generation_config,
                    max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                    temperature=None, top_p=None, top_k=None,
                    pad_token_id=self.tokenizer.pad_token_id, **self._generate_options())
            new = out[:len(idx), enc["input_ids"].shape[1]:]
            for i, ids in zip(idx, new, strict=True):
                outputs[i] = self._decode(ids, stop)
        return outputs

    def _before_batches(self, longest: int, max_new_tokens: int) -> None:
        """Called once per `generate` with the longest prompt (a subclass fixes shapes)."""

    def _encode(self, texts: list[str], longest: int, max_new_tokens: int) -> Any:
        """One left-padded batch; a subclass may pad further (to fixed shapes)."""
        return self.tokenizer(texts, return_tensors="pt", padding=True,
                              add_special_tokens=False).to(self.device)

    def _generate_options(self) -> dict[str, Any]:
        """Extra `generate` arguments of a subclass (cache implementation, compilation)."""
        return {}

    def _decode(self, ids: Any, stop: Sequence[str]) -> str:
        return decode_completion(self.tokenizer, ids, stop)

    def close(self) -> None:
        """Drop the weights and return the device memory (the caching allocator keeps freed
        blocks for this process otherwise, which an agent's job on the same GPU cannot use)."""
        release_model(self)
