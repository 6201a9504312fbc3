"""`StaticCacheEngine`: transformers `generate` with a static KV cache and, on a GPU, the decode
step compiled once per shape, with the compile cache kept on disk.

Why: plain `generate` is bound by Python overhead (about 15 decode steps/s on an H200 whatever
the model size, see `../shared/brief/environment.md`). A static cache lets `torch.compile`
capture the decode step as CUDA graphs (transformers' own "reduce-overhead" auto-compile), about
3.5x plain batch-256 `generate` once compiled. Compilation is per shape and per process, so the
shapes are made few and repeatable: prompts are length-sorted (as in `TransformersEngine`), the
static cache of a whole evaluation has one length (the longest prompt rounded up to a bucket of
`bucket_step` tokens, plus the new tokens), rows are padded to a power of two, and inductor's
FX-graph and AOTAutograd caches live under `$A2RL_HOME/cache/torchinductor`, so a later grader
process skips most of the compile.

On CPU the engine does not compile: measured on 2 cores with the tiny model, compiling the
decode step costs tens of seconds per shape (and a re-trace in every process even with a warm
disk cache), which a small CPU grading job never earns back (see `bench/RESULTS.md`, "Grading
engines"), so on CPU it is an eager static cache. Greedy outputs
equal plain `generate`'s on the tiny model in float32 (`tests/test_engines.py`): padding is
masked out and position ids come from the attention mask.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .engine import TransformersEngine, transformers_engine_version

#: The longest prompt of an evaluation is rounded up to a multiple of this many tokens to
#: size the static cache (one compiled decode shape per bucket and row count).
BUCKET_STEP = 64
#: Compiled shapes allowed per process before dynamo falls back to eager (the default, 8, is
#: smaller than buckets x row counts of one evaluation).
RECOMPILE_LIMIT = 64


def bucket_length(longest: int, max_new_tokens: int, *, step: int = BUCKET_STEP,
                  max_positions: int | None = None) -> int:
    """The prompt length a static cache is sized for when the longest prompt has `longest`
    tokens.

    The next multiple of `step`, but never so long that the bucket plus the generated tokens
    exceed `max_positions` when the batch itself fits (the model's position limit).
    """
    bucket = -(-max(longest, 1) // step) * step
    if max_positions is not None and bucket + max_new_tokens > max_positions:
        bucket = max(longest, max_positions - max_new_tokens)
    return bucket


def row_bucket(rows: int, batch_size: int) -> int:
    """Rows padded to the next power of two (at most `batch_size`), so that a short last batch
    reuses a compiled shape instead of compiling a new one."""
    padded = 1
    while padded < rows:
        padded *= 2
    return max(rows, min(padded, batch_size))


def compile_cache_dir(home_dir: Path) -> Path:
    return home_dir / "cache" / "torchinductor"


def configure_compile_cache(cache_dir: Path) -> None:
    """Point inductor's caches at `cache_dir` and turn the FX graph and AOTAutograd caches on,
    so a later grader process reuses compiled code. Set unconditionally: torch writes its own
    default (under /tmp) into `TORCHINDUCTOR_CACHE_DIR` the first time it asks, so a value
    found there is no sign of a user's choice; inductor reads the variable at every lookup."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    import torch._dynamo
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit,
                                               RECOMPILE_LIMIT)


def static_engine_version(compiled: bool, bucket_step: int = BUCKET_STEP) -> str:
    """The provenance string of `StaticCacheEngine`, without loading a model."""
    shape = f"compiled, buckets of {bucket_step}" if compiled else "eager"
    return f"{transformers_engine_version()}, static cache, {shape}"


class StaticCacheEngine(TransformersEngine):
    """Static-cache generation, one cache length per call; compiled on CUDA (see the module
    docstring).

    `compile=None` compiles on CUDA only; `compile_cache` is where compiled code is kept
    (the grader passes `$A2RL_HOME/cache/torchinductor`).
    """

    engine_name = "transformers-static"

    def __init__(
        self,
        model_dir: Path,
        *,
        device: str | None = None,
        batch_size: int = 64,
        chat_template: str | None = None,
        tokenizer_dir: Path | None = None,
        compile: bool | None = None,
        compile_cache: Path | None = None,
        bucket_step: int = BUCKET_STEP,
    ) -> None:
        super().__init__(model_dir, device=device, batch_size=batch_size,
                         chat_template=chat_template, tokenizer_dir=tokenizer_dir)
        self.compile = self.device.startswith("cuda") if compile is None else compile
        self.bucket_step = bucket_step
        self.max_positions: int | None = getattr(self.model.config,
                                                 "max_position_embeddings", None)
        if self.compile and compile_cache is not None:
            configure_compile_cache(compile_cache)
        self.engine_version = static_engine_version(self.compile, bucket_step)

    def _before_batches(self, longest: int, max_new_tokens: int) -> None:
        """Pin the static cache's length for the whole call: transformers sizes each new cache
        to max(this call's need, `_previous_max_cache_length`), and the compiled decode step's
        shapes are (rows, cache length) only (the 4D mask is built outside it, at the cache's
        size). So one cache length per evaluation, a bucket of the longest prompt plus
        `max_new_tokens`, means one compiled decode step per row count, the same shape in the
        next evaluation of the same split, and a hit in the on-disk compile cache."""
        if self.compile:
            cache_len = bucket_length(longest, max_new_tokens, step=self.bucket_step,
                                      max_positions=self.max_positions) + max_new_tokens
            previous = getattr(self.model, "_previous_max_cache_length", -1)
            self.model._previous_max_cache_length = max(previous, cache_len)

    def _encode(self, texts: list[str], longest: int, max_new_tokens: int) -> Any:
        """Left-padded to the batch's longest prompt, as plain `generate` (the prefill is not
        compiled, so its shape costs nothing); when compiling, rows are padded to a power of
        two so that a short last batch reuses a compiled shape."""
        if self.compile:
            texts = texts + [texts[-1]] * (row_bucket(len(texts), self.batch_size) - len(texts))
        return super()._encode(texts, longest, max_new_tokens)

    def _generate_options(self) -> dict[str, Any]:
        if not self.compile:
            return {"cache_implementation": "static", "disable_compile": True}
        from transformers import CompileConfig

        config = CompileConfig(fullgraph=False, dynamic=False, mode="reduce-overhead")
        if not self.device.startswith("cuda"):
            config._compile_all_devices = True  # measuring CPU compilation (bench only)
            config.mode = "default"
        return {"cache_implementation": "static", "compile_config": config}
