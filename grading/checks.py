"""Checkpoint validation: what `submit_checkpoint` runs before anything is queued.

Each refusal is a sentence the agent can act on. The order matters, and so does where each step
runs. In the server process, only cheap checks that read bounded bytes: files present, no pickle
weights, no PEFT adapter files the base model lacks, no custom code, then `checkpoint_shape`
(config.json and the safetensors headers must be the base model's). Then, in a process of its
own with a memory and a time limit (`validate`): the config as transformers reads it (renamed
keys compared by meaning), loading (never `trust_remote_code`), the tokenizer's vocabulary and
the comparison with the base model. The server never loads a submitted checkpoint, nor imports
torch or transformers for one.

`l2_relative` is ||w - w0|| / ||w0|| over all parameters (the flattened state dict, tied
weights counted once per name). A checkpoint identical to the base is refused; one with
`l2_relative < NEAR_COPY_L2` (1e-3: about what a handful of small optimizer steps give) is
accepted but flagged `near_copy`, so reports can tell "trained" from "barely touched".
"""

from __future__ import annotations

from pathlib import Path

from a2rl.layout import OUTPUT

from .checkpoint_shape import ShapeRefused, check_config, check_weights, read_json
from .validate import ValidationLimits, run_validator
from .verdict import NEAR_COPY_L2, SAVE_HINT, CheckpointCheck, CheckpointRefused

__all__ = ["NEAR_COPY_L2", "SAVE_HINT", "CheckpointCheck", "CheckpointRefused",
           "validate_checkpoint", "validate_copy"]

_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
#: pickle-based weights: loading them runs code, so they are refused, never loaded
_PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt",
                    "tokenizer_config.json")


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


#: what makes transformers load a PEFT adapter instead of (or over) the weights beside it:
#: with peft installed, `from_pretrained` on a folder holding `adapter_config.json` loads the
#: model that file names and applies `adapter_model.*` to it
_ADAPTER_PREFIX = "adapter_"


def _check_files(real: Path, shown: str, base_dir: Path) -> None:
    names = {p.name for p in real.iterdir()}
    if names & set(_PICKLE_FILES):
        raise CheckpointRefused(
            f"{shown} holds pickle weights ({sorted(names & set(_PICKLE_FILES))[0]}), which are "
            "never loaded: save with model.save_pretrained(dir, safe_serialization=True)")
    has_weights = any(n in names for n in _WEIGHT_FILES) or any(
        n.startswith("model-") and n.endswith(".safetensors") for n in names)
    if "adapter_config.json" in names and not has_weights:
        raise CheckpointRefused(
            f"{shown} holds a LoRA/PEFT adapter only (adapter_config.json, no full weights). "
            "Merge it into the base model and save the full model: "
            "model = model.merge_and_unload(); model.save_pretrained(dir); "
            "tokenizer.save_pretrained(dir)")
    # beside full weights: what would load is not what was checked (the adapter's own base
    # and deltas), so refused unless the base model ships the same file
    adapter = sorted(n for n in names if n.startswith(_ADAPTER_PREFIX)
                     and not (base_dir / n).is_file())
    if adapter:
        raise CheckpointRefused(
            f"{shown} holds PEFT adapter files ({', '.join(adapter[:3])}) beside its full "
            "weights, and transformers would load the adapter instead: merge it "
            "(model = model.merge_and_unload()) and save the merged model without them")
    if "config.json" not in names:
        raise CheckpointRefused(f"{shown} has no config.json: {SAVE_HINT}")
    if not has_weights:
        raise CheckpointRefused(f"{shown} has no model weights (model.safetensors): "
                                f"{SAVE_HINT}")
    if not any(n in names for n in _TOKENIZER_FILES):
        raise CheckpointRefused(f"{shown} has no tokenizer files: {SAVE_HINT}")
    _refuse_custom_code(real, names, shown)


def _refuse_custom_code(real: Path, names: set[str], shown: str) -> None:
    """Custom model or tokenizer code is never run (`trust_remote_code` is always False), and a
    checkpoint that asks for it is refused outright rather than loaded as something else."""
    code = sorted(n for n in names if n.endswith(".py"))
    for name in ("config.json", "tokenizer_config.json"):
        if name in names:
            try:
                cfg = read_json(real / name, f"{shown}/{name}")
            except ShapeRefused as exc:
                raise CheckpointRefused(str(exc)) from None
            if isinstance(cfg, dict) and "auto_map" in cfg:
                code.append(f"{name}: auto_map")
    if code:
        raise CheckpointRefused(f"{shown} asks for custom code ({', '.join(code[:3])}): "
                                "checkpoints must load with the standard transformers classes "
                                "(remote code is never run); save with save_pretrained from "
                                "the base architecture")


def _check_shape(real: Path, base_dir: Path, shown: str) -> int:
    """config.json and the safetensors headers against the base's; the number of parameters
    (what sizes the validating process's memory limit)."""
    try:
        check_config(real, base_dir, shown)
        return check_weights(real, base_dir, shown)
    except ShapeRefused as exc:
        raise CheckpointRefused(str(exc)) from None


def validate_copy(copy_dir: Path, base_dir: Path, shown: str,
                  limits: ValidationLimits | None = None) -> CheckpointCheck:
    """Check the grader's copy of a submission (see `a2rl.tools.checkpoint_copy`): a loadable full
    checkpoint derived from (but not equal to) the base model in `base_dir`. `shown` is the
    path the agent gave; `limits` bound the loading process. Never raises for a bad
    checkpoint: the verdict is in the result."""
    try:
        real = Path(copy_dir)
        _check_files(real, shown, Path(base_dir))
        n_params = _check_shape(real, Path(base_dir), shown)
    except CheckpointRefused as exc:
        return CheckpointCheck(ok=False, error=str(exc))
    verdict: CheckpointCheck = run_validator(real, Path(base_dir), shown, n_params,
                                             limits or ValidationLimits())
    return verdict


def validate_checkpoint(path: Path, output_dir: Path, base_dir: Path,
                        limits: ValidationLimits | None = None) -> CheckpointCheck:
    """Check that `path` is a loadable full checkpoint under `output_dir`, derived from (but not
    equal to) the base model in `base_dir`. Never raises for a bad checkpoint: the verdict and
    the message are in the result. For folders we trust (tests, tools); a submission is checked
    on its copy with `validate_copy`."""
    output_dir = Path(output_dir).resolve()
    try:
        real = _locate(Path(path), output_dir)
    except CheckpointRefused as exc:
        return CheckpointCheck(ok=False, error=str(exc))
    return validate_copy(real, base_dir, _rel(real, output_dir), limits)
