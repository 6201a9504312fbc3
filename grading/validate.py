"""`python -m a2rl.grading.validate`: load a submitted checkpoint and compare it with the base,
in a process of its own, under an address-space limit; and `run_validator`, its caller.

Why a process: loading runs transformers on files the agent wrote. The server checks their
shape first (`checkpoint_shape`), but whatever loading still costs (a tokenizer, a loader bug)
is this process's memory and time, never the server's: it sets RLIMIT_AS on itself before
importing torch, and the caller kills its process group at the timeout. It reads the copy and
the base folder, and writes one `CheckpointCheck` JSON (ok, or refused with the reason) to
`--out`. Exit 0 with a verdict; 3 when it ran out of memory (one line on stderr); anything else
is a crash whose last stderr line the caller reports.
"""

from __future__ import annotations

import argparse
import math
import resource
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

#: What the interpreter, torch and transformers take before any weights (measured: about
#: 1.2 GB of address space on CPU; threads' stacks and malloc arenas grow with the cores).
FIXED_OVERHEAD_BYTES = 4 << 30
#: The model in float32, the base's tensors and the submission's mapped file, with room.
BYTES_PER_PARAM = 24
OOM_EXIT = 3
_OOM_WORDS = ("can't allocate memory", "not enough memory", "failed to map segment",
              "Cannot allocate memory")


class ValidationLimits(BaseModel):
    """What the validating process may take: address space (0: derived from the base's size)
    and wall-clock seconds."""

    memory_bytes: int = 0
    timeout_s: float = 600.0

    def memory_for(self, n_params: int) -> int:
        return self.memory_bytes or FIXED_OVERHEAD_BYTES + BYTES_PER_PARAM * n_params


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says an allocation failed: a `MemoryError`, a loader's own words (the
    tokenizer's Rust says "os error 12", torch's allocator and the dynamic loader theirs), or
    a C extension that returned an error without setting one (CPython's `SystemError`): in
    this process, under its address-space limit, an allocation it did not check."""
    unset = isinstance(exc, SystemError) and "without exception set" in str(exc)
    return isinstance(exc, MemoryError) or unset or any(m in str(exc) for m in _OOM_WORDS)


def _raise_if_out_of_memory(exc: Exception) -> None:
    """A loader that failed for want of memory failed for the limit, not for the checkpoint:
    said as such (OOM_EXIT)."""
    if out_of_memory(exc):
        raise MemoryError(str(exc)[:200]) from exc


def _load(real: Path, shown: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .verdict import SAVE_HINT, CheckpointRefused

    try:
        tokenizer = AutoTokenizer.from_pretrained(real, trust_remote_code=False)
    except Exception as exc:
        _raise_if_out_of_memory(exc)
        raise CheckpointRefused(f"the tokenizer in {shown} does not load: {exc}. "
                                f"{SAVE_HINT}") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(
            real, trust_remote_code=False, dtype="float32", low_cpu_mem_usage=True)
    except Exception as exc:
        _raise_if_out_of_memory(exc)
        raise CheckpointRefused(f"the model in {shown} does not load with "
                                f"AutoModelForCausalLM: {exc}") from exc
    return model, tokenizer


def _compare(model: Any, tokenizer: Any, base_dir: Path, shown: str) -> tuple[float, int]:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from .checkpoint_shape import weight_files
    from .verdict import CheckpointRefused

    base_tok = AutoTokenizer.from_pretrained(base_dir)
    if tokenizer.get_vocab() != base_tok.get_vocab():
        raise CheckpointRefused(f"the tokenizer in {shown} has a different vocabulary from the "
                                "base model's: save the base tokenizer with the checkpoint")
    base_sd: dict[str, torch.Tensor] = {}
    for st in weight_files(base_dir, "the base model"):
        base_sd.update(load_file(str(st)))
    sd = model.state_dict()
    diff_sq = base_sq = 0.0
    identical = True
    n_params = 0
    for name, w0 in base_sd.items():
        w = sd.get(name)
        if w is None:
            raise CheckpointRefused(f"{shown} lacks the parameter {name} of the base model")
        if tuple(w.shape) != tuple(w0.shape):
            raise CheckpointRefused(f"{shown}: parameter {name} has shape {tuple(w.shape)}, "
                                    f"the base model's is {tuple(w0.shape)}")
        w, w0 = w.detach().float(), w0.float()
        if identical and not torch.equal(w, w0):
            identical = False
        diff_sq += float((w - w0).pow(2).sum())
        base_sq += float(w0.pow(2).sum())
        n_params += w0.numel()
    if identical:
        raise CheckpointRefused("these weights are the base model's: train before submitting")
    return math.sqrt(diff_sq) / max(math.sqrt(base_sq), 1e-12), n_params


def load_and_compare(copy_dir: Path, base_dir: Path, shown: str) -> Any:
    """The verdict on an already shape-checked copy (this process's side)."""
    from .checkpoint_shape import ShapeRefused, check_normalized
    from .verdict import NEAR_COPY_L2, CheckpointCheck, CheckpointRefused

    try:
        check_normalized(copy_dir, base_dir, shown)
    except ShapeRefused as exc:
        return CheckpointCheck(ok=False, error=str(exc))
    try:
        model, tokenizer = _load(copy_dir, shown)
        l2, n_params = _compare(model, tokenizer, base_dir, shown)
    except CheckpointRefused as exc:
        return CheckpointCheck(ok=False, error=str(exc))
    return CheckpointCheck(ok=True, path=str(copy_dir), l2_relative=l2,
                           near_copy=l2 < NEAR_COPY_L2, n_params=n_params)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m a2rl.grading.validate",
                                     description="Load a checkpoint and compare it with the base.")
    parser.add_argument("--copy", required=True, type=Path)
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--shown", required=True)
    parser.add_argument("--memory-bytes", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    # first, before torch maps anything: every later allocation counts against it
    resource.setrlimit(resource.RLIMIT_AS, (args.memory_bytes, args.memory_bytes))
    try:
        verdict = load_and_compare(args.copy, args.base, args.shown)
    except MemoryError:
        sys.stderr.write("out of memory\n")
        return OOM_EXIT
    except (RuntimeError, ImportError, OSError, SystemError) as exc:
        # how torch's allocator and the dynamic loader say they hit the address-space limit
        if out_of_memory(exc):
            sys.stderr.write(f"out of memory: {str(exc)[:200]}\n")
            return OOM_EXIT
        raise
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(verdict.model_dump_json())
    tmp.rename(args.out)
    return 0


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def run_validator(copy_dir: Path, base_dir: Path, shown: str, n_params: int,
                  limits: ValidationLimits) -> Any:
    """Run `python -I -m a2rl.grading.validate` on the copy (the server's side; started warm,
    `prefork`); a `CheckpointCheck`, refused with one line when the process times out, runs out
    of memory or crashes, and carrying the CPU seconds the process used either way. Isolated
    mode and a private working folder, as for the grading worker."""
    from .prefork import run_to_end, start_python
    from .verdict import CheckpointCheck

    memory = limits.memory_for(n_params)
    with tempfile.TemporaryDirectory(prefix="a2rl-validate-") as tmp:
        out, err_path, cwd = Path(tmp) / "verdict.json", Path(tmp) / "stderr", Path(tmp) / "cwd"
        cwd.mkdir(mode=0o700)
        args = ["--copy", str(copy_dir), "--base", str(base_dir), "--shown", shown,
                "--memory-bytes", str(memory), "--out", str(out)]
        proc = start_python("a2rl.grading.validate", args, cwd, err_path)
        timed_out = run_to_end(proc, limits.timeout_s)
        lines = err_path.read_text(errors="replace").strip().splitlines()
        if not timed_out and proc.returncode == 0 and out.is_file():
            verdict = CheckpointCheck.model_validate_json(out.read_text())
            # the kernel's count, never what the process wrote about itself
            return verdict.model_copy(update={"cpu_s": proc.cpu_s})
    if timed_out:
        error = (f"loading {shown} took longer than {limits.timeout_s:g}s and was stopped: "
                 "submit a checkpoint saved with save_pretrained from the base model")
    elif proc.returncode in (OOM_EXIT, -signal.SIGKILL):
        error = (f"loading {shown} needed more than {_gib(memory)} of memory and was stopped: "
                 "submit a checkpoint of the base model's size")
    else:
        last = lines[-1][:300] if lines else f"exit code {proc.returncode}"
        error = f"{shown} could not be loaded ({last}); save it with save_pretrained"
    return CheckpointCheck(ok=False, error=error, cpu_s=proc.cpu_s)


if __name__ == "__main__":
    sys.exit(main())
