"""Does a grader fit on the GPU beside the agent's job? Estimate, check, wait, or say why not.

Why: on one GPU the agent's training job may hold most of the memory when a submission is
graded. Loading the model anyway ends in a CUDA out-of-memory crash whose message says nothing
useful. Instead the grader estimates what it needs (weights as loaded + the KV cache of one
batch + a margin), compares it with the device's free memory (`torch.cuda.mem_get_info`), waits
a bounded time for the job to release memory, and otherwise fails with a plain message:
"waiting for GPU memory: need X GiB, free Y GiB". Every function takes the memory query as an
argument, so all of this is tested on CPU.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

GIB = 1024**3
#: Weights as loaded x this = weights + CUDA context, allocator slack and activations.
WEIGHTS_FACTOR = 1.3
#: Fixed headroom for the CUDA context and kernels' workspaces.
FIXED_MARGIN_BYTES = 1 * GIB
#: How long a grader waits for memory before it gives up (the queue's timeout is longer).
DEFAULT_WAIT_S = 120.0

MemoryQuery = Callable[[], tuple[int, int]]  # (free bytes, total bytes)

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


class GpuMemoryUnavailable(RuntimeError):
    """The grader's model does not fit in the device's free memory, even after waiting."""


class MemoryFit(BaseModel):
    """One comparison of the estimate with the device's free memory."""

    need_bytes: int
    free_bytes: int
    total_bytes: int

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.free_bytes

    @property
    def message(self) -> str:
        need, free = self.need_bytes / GIB, self.free_bytes / GIB
        if self.fits:
            return f"GPU memory fits: need {need:.1f} GiB, free {free:.1f} GiB"
        return f"waiting for GPU memory: need {need:.1f} GiB, free {free:.1f} GiB"


def weights_bytes(model_dir: Path, load_dtype_bytes: int = 2) -> int:
    """Bytes of the weights once loaded in a `load_dtype_bytes` dtype (bf16 on a GPU).

    The checkpoint's files give the parameter count: their size over the stored dtype's width
    (from `config.json`; float32 when it does not say).
    """
    model_dir = Path(model_dir)
    files = [p for p in model_dir.glob("*") if p.suffix in (".safetensors", ".bin", ".pt")]
    on_disk = sum(p.stat().st_size for p in files)
    stored = 4
    config = model_dir / "config.json"
    if config.is_file():
        data = json.loads(config.read_text())
        name = str(data.get("dtype") or data.get("torch_dtype") or "float32")
        stored = _DTYPE_BYTES.get(name.removeprefix("torch."), 4)
    return on_disk * load_dtype_bytes // stored


def kv_cache_bytes(model_dir: Path, batch_size: int, max_tokens: int,
                   dtype_bytes: int = 2) -> int:
    """Keys and values of every layer for `batch_size` sequences of `max_tokens` tokens."""
    data = json.loads((Path(model_dir) / "config.json").read_text())
    data = data.get("text_config", data)
    layers = int(data.get("num_hidden_layers", 0))
    heads = int(data.get("num_attention_heads", 1))
    kv_heads = int(data.get("num_key_value_heads") or heads)
    head_dim = int(data.get("head_dim") or data.get("hidden_size", 0) // heads)
    return 2 * layers * kv_heads * head_dim * dtype_bytes * batch_size * max_tokens


def estimate_need(model_dir: Path, batch_size: int, max_tokens: int) -> int:
    """Bytes the grader needs on the device: weights x factor + KV cache + a fixed margin."""
    return int(weights_bytes(model_dir) * WEIGHTS_FACTOR
               + kv_cache_bytes(model_dir, batch_size, max_tokens) + FIXED_MARGIN_BYTES)


def check_fit(need_bytes: int, query: MemoryQuery) -> MemoryFit:
    free, total = query()
    return MemoryFit(need_bytes=need_bytes, free_bytes=free, total_bytes=total)


def wait_for_memory(
    need_bytes: int,
    query: MemoryQuery,
    *,
    wait_s: float = DEFAULT_WAIT_S,
    poll_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    report: Callable[[str], None] | None = None,
) -> MemoryFit:
    """Return once `need_bytes` are free; report the wait; raise `GpuMemoryUnavailable` after
    `wait_s` seconds (at once when the device is too small even when empty)."""
    report = report or (lambda line: print(line, file=sys.stderr, flush=True))
    deadline = clock() + wait_s
    fit = check_fit(need_bytes, query)
    if fit.fits:
        return fit
    if need_bytes > fit.total_bytes:
        raise GpuMemoryUnavailable(
            f"the model cannot fit on this GPU: need {need_bytes / GIB:.1f} GiB, the device "
            f"has {fit.total_bytes / GIB:.1f} GiB")
    report(fit.message)
    while clock() < deadline:
        sleep(poll_s)
        fit = check_fit(need_bytes, query)
        if fit.fits:
            report(fit.message)
            return fit
    raise GpuMemoryUnavailable(
        f"{fit.message} (gave up after {wait_s:g} s: the agent's job holds the rest; "
        "the submission can be graded again when it stops)")


def cuda_mem_get_info() -> tuple[int, int]:
    """The real query: (free, total) bytes of the current CUDA device."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(free), int(total)
