"""A language model that answers from a script, behind two faces that end a completion the way
each real engine does:

- `FakeVLLM`: the `vllm` module as the reference harness's code calls it (`LLM`, its
  `generate`, `chat` and `get_tokenizer`, `SamplingParams`), installed in `sys.modules`. It
  ends a completion as vLLM does: at the end of sequence (the tokenizer's, and with
  `generation_config="auto"`, vLLM's default, every id of the **model folder's**
  generation_config.json: the checkpoint's), at `stop_token_ids`, at `max_tokens`, at the
  context (`max_model_len`), and at the first stop string of the text detokenized with
  `skip_special_tokens` (the stop string itself left out); a prompt longer than the context
  is an error.
- `ScriptedEngine`: our own `TransformersEngine` (its rendering, batching, decoding and stop
  strings, `engine.decode_completion`) around a model whose `generate` returns the script's
  tokens up to and including the first id of the grader's `generation_config.eos_token_id`,
  then padding, as transformers' `generate` does.

A script is `respond(prompt_text) -> continuation text`; the text may hold special tokens
(`<|im_end|>`, `<|endoftext|>`), which the tokenizer reads as such. Both faces record the
exact prompt text the model saw.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from a2rl.grading.engine import TransformersEngine, greedy_config, load_tokenizer

Respond = Callable[[str], str]


class SamplingParams:
    """vLLM's `SamplingParams`, the fields the harness and OpenCompass set."""

    def __init__(self, temperature: float = 1.0, max_tokens: int | None = 16,
                 stop: str | Sequence[str] | None = None,
                 stop_token_ids: Sequence[int] | None = None, ignore_eos: bool = False,
                 skip_special_tokens: bool = True, include_stop_str_in_output: bool = False,
                 **other: Any) -> None:
        self.temperature, self.max_tokens = temperature, max_tokens
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids = list(stop_token_ids or [])
        self.ignore_eos, self.skip_special_tokens = ignore_eos, skip_special_tokens
        self.include_stop_str_in_output = include_stop_str_in_output
        self.other = other

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens,
                "stop": self.stop, **self.other}


class _Completion:
    def __init__(self, text: str, token_ids: list[int], finish_reason: str) -> None:
        self.text, self.token_ids, self.finish_reason = text, token_ids, finish_reason


class _Output:
    def __init__(self, prompt: str, completion: _Completion) -> None:
        self.prompt, self.outputs = prompt, [completion]


class FakeVLLM:
    """`install(monkeypatch)` puts the `vllm` module in place; `calls` holds (prompt text,
    SamplingParams.as_dict()) per completion."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.engines: list[Any] = []
        fake = self

        class LLM:
            def __init__(self, model: str, tokenizer: str | None = None,
                         generation_config: str = "auto", max_model_len: int | None = None,
                         **kw: Any) -> None:
                from transformers import AutoTokenizer, GenerationConfig

                self.tokenizer = AutoTokenizer.from_pretrained(tokenizer or model)
                self.eos = {self.tokenizer.eos_token_id}
                if generation_config == "auto" and (Path(model) / "generation_config.json"
                                                     ).is_file():
                    ids = GenerationConfig.from_pretrained(model).eos_token_id
                    self.eos |= {ids} if isinstance(ids, int) else set(ids or [])
                self.max_model_len = max_model_len or 1 << 30
                self.kwargs = {"model": model, "max_model_len": max_model_len, **kw}
                fake.engines.append(self)

            def get_tokenizer(self) -> Any:
                return self.tokenizer

            def generate(self, prompts: Sequence[Any], sampling_params: SamplingParams,
                         **_: Any) -> list[_Output]:
                return [self._one(p, sampling_params) for p in prompts]

            def chat(self, messages: list[dict[str, str]], sampling_params: SamplingParams,
                     **_: Any) -> list[_Output]:
                text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                          add_generation_prompt=True)
                return [self._one(text, sampling_params)]

            def _one(self, prompt: Any, sp: SamplingParams) -> _Output:
                tok = self.tokenizer
                if isinstance(prompt, dict):
                    ids = list(prompt["prompt_token_ids"])
                    text = tok.decode(ids)
                else:  # a text prompt is tokenized as vLLM does, special tokens added
                    text, ids = str(prompt), tok.encode(str(prompt))
                if len(ids) > self.max_model_len:
                    raise ValueError(f"prompt of {len(ids)} tokens is longer than the "
                                     f"maximum model length of {self.max_model_len}")
                fake.calls.append((text, sp.as_dict()))
                stream = tok.encode(fake.respond(text), add_special_tokens=False)
                ends = set(sp.stop_token_ids) | (set() if sp.ignore_eos else self.eos)
                room = self.max_model_len - len(ids)
                out: list[int] = []
                for t in stream:
                    if t in ends:
                        return _Output(text, _Completion(self._text(out, sp), out + [t],
                                                         "stop"))
                    out.append(t)
                    decoded = tok.decode(out, skip_special_tokens=sp.skip_special_tokens)
                    for s in sp.stop:
                        at = decoded.find(s)
                        if at >= 0:
                            cut = at + len(s) if sp.include_stop_str_in_output else at
                            return _Output(text, _Completion(decoded[:cut], out, "stop"))
                    if len(out) >= min(sp.max_tokens or room, room):
                        break
                return _Output(text, _Completion(self._text(out, sp), out, "length"))

            def _text(self, ids: list[int], sp: SamplingParams) -> str:
                return str(self.tokenizer.decode(ids,
                                                 skip_special_tokens=sp.skip_special_tokens))

        self.LLM = LLM

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        vllm = types.ModuleType("vllm")
        vllm.LLM, vllm.SamplingParams = self.LLM, SamplingParams  # type: ignore[attr-defined]
        vllm.__version__ = "fake"  # type: ignore[attr-defined]
        parallel = types.ModuleType("vllm.distributed.parallel_state")
        parallel.destroy_model_parallel = lambda: None  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "vllm", vllm)
        monkeypatch.setitem(sys.modules, "vllm.distributed", types.ModuleType("vllm.distributed"))
        monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", parallel)


class _ScriptedLM:
    """transformers' `generate`, greedy, for a model that says what `respond` says."""

    def __init__(self, tokenizer: Any, respond: Respond, prompts: list[str]) -> None:
        self.tokenizer, self.respond, self.prompts = tokenizer, respond, prompts

    def generate(self, input_ids: Any, attention_mask: Any, generation_config: Any,
                 max_new_tokens: int, pad_token_id: int, **_: Any) -> Any:
        import torch

        eos = generation_config.eos_token_id
        eos = {eos} if isinstance(eos, int) else set(eos or [])
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            text = self.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
            self.prompts.append(text)
            new = self.tokenizer.encode(self.respond(text), add_special_tokens=False)
            end = next((i + 1 for i, t in enumerate(new) if t in eos), len(new))
            rows.append(new[:min(end, max_new_tokens)])
        width = max((len(r) for r in rows), default=0)
        padded = [r + [pad_token_id] * (width - len(r)) for r in rows]
        return torch.cat([input_ids, torch.tensor(padded, dtype=input_ids.dtype).reshape(
            len(rows), width)], dim=1)


class ScriptedEngine(TransformersEngine):
    """Our engine's code path with a scripted model: the base model's tokenizer and end of
    sequence (`model_dir`), stop strings cut by `decode_completion`. `prompts` holds every
    prompt text the model saw; `calls` every `generate` call's settings."""

    engine_name, engine_version = "scripted", "1"

    def __init__(self, model_dir: Path, respond: Respond, *, batch_size: int = 64) -> None:
        self.device, self.batch_size = "cpu", batch_size
        self.tokenizer = load_tokenizer(model_dir)
        self.generation_config = greedy_config(self.tokenizer, model_dir)
        self.prompts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.model = _ScriptedLM(self.tokenizer, respond, self.prompts)

    def generate(self, prompts: Sequence[Any], max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        self.calls.append({"n": len(prompts), "max_new_tokens": max_new_tokens,
                           "stop": list(stop), "types": {type(p).__name__ for p in prompts}})
        return super().generate(prompts, max_new_tokens, stop)


def write_checkpoint_eos(folder: Path, eos_ids: list[int]) -> None:
    """A submission's own end of sequence, declared in its generation_config.json."""
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_ids}))
