"""Checkpoint validation: what `submit_checkpoint` runs before anything is queued.

Each refusal is a sentence the agent can act on. The order matters: cheap filesystem checks
first (location, files present), then loading (never `trust_remote_code`; safetensors or
`weights_only` torch files only), then comparison with the base model.

`l2_relative` is ||w - w0|| / ||w0|| over all parameters (the flattened state dict, tied
weights counted once per name). A checkpoint identical to the base is refused; one with
`l2_relative < NEAR_COPY_L2` (1e-3: about what a handful of small optimizer steps give) is
accepted but flagged `near_copy`, so reports can tell "trained" from "barely touched".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from a2rl.layout import OUTPUT

NEAR_COPY_L2 = 1e-3

_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt",
                    "tokenizer_config.json")
_SAVE_HINT = ("save both with model.save_pretrained(dir) and tokenizer.save_pretrained(dir)")


class CheckpointCheck(BaseModel):
    """The verdict on one checkpoint directory."""

    ok: bool
    error: str | None = None
    path: str | None = None  # the resolved directory
    l2_relative: float | None = None
    near_copy: bool = False
    n_params: int | None = None


class CheckpointRefused(Exception):
    """Raised inside validation; its message is what the agent reads."""


def _rel(path: Path, output_dir: Path) -> str:
    try:
        return str(Path(OUTPUT) / path.relative_to(output_dir))
    except ValueError:
        return str(path)


def _locate(path: Path, output_dir: Path) -> Path:
    output_dir = output_dir.resolve()
    if not path.is_absolute():
        path = output_dir.parent / path
    if not path.exists() and not path.is_symlink():
        raise CheckpointRefused(f"no such directory: {path}. Save the checkpoint under output/ "
                                "and pass its path, for example output/sft")
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise CheckpointRefused(f"cannot resolve {path}: {exc}") from exc
    if real != output_dir and output_dir not in real.parents:
        raise CheckpointRefused(f"{path} resolves to {real}, which is outside output/: "
                                "checkpoints must be directories under output/ "
                                "(symlinks are followed)")
    if real == output_dir:
        raise CheckpointRefused("pass a checkpoint directory under output/, not output/ itself")
    if not real.is_dir():
        raise CheckpointRefused(f"{_rel(real, output_dir)} is a file; pass the checkpoint "
                                f"directory that holds config.json and the weights")
    return real


def _check_files(real: Path, shown: str) -> None:
    names = {p.name for p in real.iterdir()}
    has_weights = any(n in names for n in _WEIGHT_FILES) or any(
        n.startswith("model-") and n.endswith(".safetensors") for n in names)
    if "adapter_config.json" in names and not has_weights:
        raise CheckpointRefused(
            f"{shown} holds a LoRA/PEFT adapter only (adapter_config.json, no full weights). "
            "Merge it into the base model and save the full model: "
            "model = model.merge_and_unload(); model.save_pretrained(dir); "
            "tokenizer.save_pretrained(dir)")
    if "config.json" not in names:
        raise CheckpointRefused(f"{shown} has no config.json: {_SAVE_HINT}")
    if not has_weights:
        raise CheckpointRefused(f"{shown} has no model weights (model.safetensors): "
                                f"{_SAVE_HINT}")
    if not any(n in names for n in _TOKENIZER_FILES):
        raise CheckpointRefused(f"{shown} has no tokenizer files: {_SAVE_HINT}")
    _refuse_custom_code(real, names, shown)
    for st in sorted(real.glob("*.safetensors")):
        try:
            from safetensors import safe_open

            with safe_open(str(st), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                    f.get_slice(key)
            size = st.stat().st_size
            _check_safetensors_size(st, size)
        except CheckpointRefused:
            raise
        except Exception as exc:
            raise CheckpointRefused(f"{shown}/{st.name} is not a readable safetensors file "
                                    f"(truncated or corrupt?): {exc}") from exc


def _refuse_custom_code(real: Path, names: set[str], shown: str) -> None:
    """Custom model or tokenizer code is never run (`trust_remote_code` is always False), and a
    checkpoint that asks for it is refused outright rather than loaded as something else."""
    import json

    code = sorted(n for n in names if n.endswith(".py"))
    for name in ("config.json", "tokenizer_config.json"):
        if name in names:
            try:
                cfg = json.loads((real / name).read_text())
            except (OSError, ValueError):
                continue  # loading says what is wrong with it
            if isinstance(cfg, dict) and "auto_map" in cfg:
                code.append(f"{name}: auto_map")
    if code:
        raise CheckpointRefused(f"{shown} asks for custom code ({', '.join(code[:3])}): "
                                "checkpoints must load with the standard transformers classes "
                                "(remote code is never run); save with save_pretrained from "
                                "the base architecture")


def _check_safetensors_size(path: Path, size: int) -> None:
    """A truncated file can still have a valid header; check the data really is all there."""
    import json
    import struct

    with path.open("rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"),
              default=0)
    if 8 + header_len + end > size:
        raise CheckpointRefused(f"{path.name} is truncated: {size} bytes, the header promises "
                                f"{8 + header_len + end}")


def _load(real: Path, shown: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(real, trust_remote_code=False)
    except Exception as exc:
        raise CheckpointRefused(f"the tokenizer in {shown} does not load: {exc}. "
                                f"{_SAVE_HINT}") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(
            real, trust_remote_code=False, dtype="float32", low_cpu_mem_usage=True)
    except Exception as exc:
        raise CheckpointRefused(f"the model in {shown} does not load with "
                                f"AutoModelForCausalLM: {exc}") from exc
    return model, tokenizer


def _compare(model: Any, tokenizer: Any, base_dir: Path, shown: str) -> tuple[float, int]:
    import torch
    from transformers import AutoConfig, AutoTokenizer

    base_cfg = AutoConfig.from_pretrained(base_dir)
    cfg = model.config
    if cfg.model_type != base_cfg.model_type or (
            list(cfg.architectures or []) != list(base_cfg.architectures or [])
            and cfg.architectures):
        raise CheckpointRefused(
            f"{shown} is a {cfg.model_type} model ({cfg.architectures}), the base model is "
            f"{base_cfg.model_type} ({base_cfg.architectures}): keep the base architecture")
    base_tok = AutoTokenizer.from_pretrained(base_dir)
    if tokenizer.get_vocab() != base_tok.get_vocab():
        raise CheckpointRefused(f"the tokenizer in {shown} has a different vocabulary from the "
                                "base model's: save the base tokenizer with the checkpoint")

    from safetensors.torch import load_file

    base_sd: dict[str, torch.Tensor] = {}
    for st in sorted(base_dir.glob("*.safetensors")):
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


def validate_copy(copy_dir: Path, base_dir: Path, shown: str) -> CheckpointCheck:
    """Check the grader's copy of a submission (see `a2rl.tools.checkpoint_copy`): a loadable full
    checkpoint derived from (but not equal to) the base model in `base_dir`. `shown` is the
    path the agent gave. Never raises for a bad checkpoint: the verdict is in the result."""
    try:
        real = Path(copy_dir)
        _check_files(real, shown)
        model, tokenizer = _load(real, shown)
        l2, n_params = _compare(model, tokenizer, Path(base_dir), shown)
    except CheckpointRefused as exc:
        return CheckpointCheck(ok=False, error=str(exc))
    return CheckpointCheck(ok=True, path=str(real), l2_relative=l2,
                           near_copy=l2 < NEAR_COPY_L2, n_params=n_params)


def validate_checkpoint(path: Path, output_dir: Path, base_dir: Path) -> CheckpointCheck:
    """Check that `path` is a loadable full checkpoint under `output_dir`, derived from (but not
    equal to) the base model in `base_dir`. Never raises for a bad checkpoint: the verdict and
    the message are in the result. For folders we trust (tests, tools); a submission is checked
    on its copy with `validate_copy`."""
    output_dir = Path(output_dir).resolve()
    try:
        real = _locate(Path(path), output_dir)
    except CheckpointRefused as exc:
        return CheckpointCheck(ok=False, error=str(exc))
    return validate_copy(real, base_dir, _rel(real, output_dir))
