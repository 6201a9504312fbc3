"""Which generation engine grades: automatic choice, the override, and building it safely.

Why one place: the grader, the baseline cache key and the benchmark must agree on the engine,
and the choice depends on the machine (CUDA, vLLM installed), so it is a pure function of those
facts and of the `grading.engine` setting (env `A2RL_GRADING__ENGINE`):

- `auto`: vLLM when it is importable and CUDA is present; else the compiled static-cache
  transformers engine on CUDA; on CPU the *eager* static-cache engine: on the tiny model it
  measured 1.22-1.29x plain `generate`'s tokens/s, outputs identical, while compiling on CPU
  made a first evaluation slower (0.75x) and pays off only once the compile cache is warm
  and the workload large, which CPU grading jobs are not (`bench/RESULTS.md`, "Grading
  engines"). Greedy outputs agree with plain `generate` (`tests/test_engines.py`).
- `transformers`: plain `generate` (the reference), `static`, `vllm`: forced; forcing vLLM
  where it is not installed is a clear error, never a silent fallback, because the engine is
  part of every score's provenance.

Before a model is loaded on CUDA, the free device memory is checked against an estimate
(`gpu_memory`), so a grader that cannot fit beside the agent's job waits and then says so.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from a2rl.registry import Registry
from a2rl.sections.base import Section, register_finder, registry_finder, section_of_owner
from a2rl.settings import Settings

from .engine import GenerationEngine, TransformersEngine, transformers_engine_version
from .engine_static import StaticCacheEngine, compile_cache_dir, static_engine_version
from .gpu_memory import (
    DEFAULT_WAIT_S,
    GIB,
    MemoryQuery,
    cuda_mem_get_info,
    estimate_need,
    wait_for_memory,
)

#: An engine's name in `ENGINES`: the built-in transformers, static and vllm, or a plugin's.
EngineKind = str
#: Prompt tokens assumed per sequence when sizing the KV cache before loading.
PROMPT_TOKENS_ESTIMATE = 1024
#: The CPU choice of `auto` (see the module docstring for the measurement behind it).
CPU_AUTO: EngineKind = "static"


class EngineUnavailable(RuntimeError):
    """The requested engine cannot run on this machine."""


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


#: Device files without which no CUDA (NVIDIA) or ROCm (AMD, which torch also reports as
#: `torch.cuda`) device can be visible to this process.
GPU_DRIVER_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/kfd")


def cuda_available() -> bool:
    """Whether torch sees a CUDA device. Without a GPU driver's files it cannot, and the answer
    is False without importing torch: the baseline cache key asks this in every command that
    makes a run, and the import alone cost each about 1.5 CPU-seconds."""
    if "torch" not in sys.modules and not any(os.path.exists(f) for f in GPU_DRIVER_FILES):
        return False
    import torch

    return torch.cuda.is_available()


def choose_engine(requested: str, *, cuda: bool, vllm: bool) -> EngineKind:
    """The engine for `requested` ("auto" or a kind) on a machine with/without CUDA and vLLM."""
    if requested == "auto":
        if cuda and vllm:
            return "vllm"
        return "static" if cuda else CPU_AUTO
    if requested == "vllm":
        if not vllm:
            raise EngineUnavailable("grading_engine=vllm but vLLM is not installed here "
                                    "(pip install vllm on a CUDA machine, or choose auto)")
        if not cuda:
            raise EngineUnavailable("grading_engine=vllm needs a CUDA GPU, and none is visible")
        return "vllm"
    if requested in ENGINES:  # a kind with no machine requirement (vLLM's is checked above)
        return requested
    *first, last = ["auto", *ENGINES.names()]
    raise EngineUnavailable(f"unknown grading.engine {requested!r}: use {', '.join(first)} "
                            f"or {last}")


def chosen_engine(settings: Settings) -> EngineKind:
    return choose_engine(settings.grading.engine, cuda=cuda_available(),
                         vllm=vllm_available())


@dataclass(frozen=True)
class EngineRequest:
    """Everything a driver needs to load an engine, decided by `build_engine`."""

    checkpoint_dir: Path
    settings: Settings
    batch_size: int
    chat_template: str | None
    tokenizer_dir: Path | None
    cuda: bool
    gpu_fraction: float  # of the whole device, for engines that reserve it up front (vLLM)


class EngineDriver(Protocol):
    """How one engine kind is named, versioned and loaded (one per `EngineKind`). A driver
    with settings of its own says so with a class attribute `settings_section`: a `Section`
    declared with `place="grading.<kind>"` (`[grading.<kind>]`), read in `build` with
    `request.settings.grading.section(ThatSection)`."""

    def identity(self, *, cuda: bool) -> tuple[str, str]:
        """(engine_name, engine_version) without loading a model (the baseline cache key)."""
        ...

    def build(self, request: EngineRequest) -> GenerationEngine: ...


class _TransformersDriver:
    def identity(self, *, cuda: bool) -> tuple[str, str]:
        return TransformersEngine.engine_name, transformers_engine_version()

    def build(self, r: EngineRequest) -> GenerationEngine:
        return TransformersEngine(r.checkpoint_dir, batch_size=r.batch_size,
                                  chat_template=r.chat_template, tokenizer_dir=r.tokenizer_dir)


class _StaticDriver:
    def identity(self, *, cuda: bool) -> tuple[str, str]:
        return StaticCacheEngine.engine_name, static_engine_version(compiled=cuda)

    def build(self, r: EngineRequest) -> GenerationEngine:
        return StaticCacheEngine(r.checkpoint_dir, batch_size=r.batch_size,
                                 chat_template=r.chat_template, tokenizer_dir=r.tokenizer_dir,
                                 compile_cache=compile_cache_dir(r.settings.home_dir))


class _VllmDriver:
    """vLLM is imported only here, when chosen: most machines do not have it."""

    def identity(self, *, cuda: bool) -> tuple[str, str]:
        from .engine_vllm import vllm_engine_version

        return "vllm", vllm_engine_version()

    def build(self, r: EngineRequest) -> GenerationEngine:
        from .engine_vllm import VllmEngine

        return VllmEngine(r.checkpoint_dir, chat_template=r.chat_template,
                          tokenizer_dir=r.tokenizer_dir, gpu_memory_utilization=r.gpu_fraction)


#: The grading engines by kind, in the same registry mechanism as tasks, agents and backends;
#: an installed package adds one through the entry-point group `a2rl.engines` (built-in names
#: win). The engine is part of every score's provenance: its `identity` (name and version) is
#: frozen with the run and kept on each evaluation, and a grading process that does not have
#: the run's engine refuses rather than grade with another (`frozen.honour`).
ENGINES: Registry[EngineDriver] = Registry("grading engine", group="a2rl.engines",
                                           check=callable)
ENGINES.register("transformers", _TransformersDriver, source="builtin")
ENGINES.register("static", _StaticDriver, source="builtin")
ENGINES.register("vllm", _VllmDriver, source="builtin")
# the settings find an engine's section (`[grading.<kind>]`) through this registry
register_finder("grading", registry_finder("grading", ENGINES.names, ENGINES.load))


def engine_section(kind: EngineKind) -> type[Section] | None:
    """The section of settings engine `kind` declares (`[grading.<kind>]`), loading it
    (`UnknownName`/`PluginLoadError`); None when it has none."""
    return section_of_owner(ENGINES.load(kind), "grading", kind)


def engine_identity(kind: EngineKind, *, cuda: bool) -> tuple[str, str]:
    """(engine_name, engine_version) of `kind` without loading a model (baseline cache key)."""
    return ENGINES.create(kind).identity(cuda=cuda)


def build_engine(
    kind: EngineKind,
    checkpoint_dir: Path,
    settings: Settings,
    *,
    batch_size: int,
    max_new_tokens: int,
    chat_template: str | None,
    tokenizer_dir: Path | None = None,
    cuda: bool | None = None,
    memory_query: MemoryQuery | None = None,
    memory_wait_s: float = DEFAULT_WAIT_S,
) -> GenerationEngine:
    """Load `kind` on `checkpoint_dir`, after checking on CUDA that it fits in free memory."""
    cuda = cuda_available() if cuda is None else cuda
    fraction = 0.85
    if cuda:
        need = estimate_need(checkpoint_dir, batch_size, PROMPT_TOKENS_ESTIMATE + max_new_tokens)
        fit = wait_for_memory(need, memory_query or cuda_mem_get_info, wait_s=memory_wait_s)
        # vLLM takes a fraction of the whole device: enough for the estimate with room for
        # its KV cache, never more than is free now (the agent's job holds the rest).
        fraction = min(0.9, max(1.5 * need, need + 2 * GIB) / fit.total_bytes,
                       (fit.free_bytes - GIB // 2) / fit.total_bytes)
    request = EngineRequest(checkpoint_dir=checkpoint_dir, settings=settings,
                            batch_size=batch_size, chat_template=chat_template,
                            tokenizer_dir=tokenizer_dir, cuda=cuda, gpu_fraction=fraction)
    return ENGINES.create(kind).build(request)
