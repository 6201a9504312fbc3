"""Base models from the Hugging Face hub: fetched once into `$A2RL_HOME/models/hub`, reused.

A task's base model is a name: the embedded `tiny-llama`, a local directory, or a hub id such as
`Qwen/Qwen2.5-1.5B`. A hub id is downloaded with `huggingface_hub.snapshot_download` into
`<home>/models/hub/<owner>--<name>` (through a `.partial` folder renamed when complete, so an
interrupted download is never mistaken for a model) and every later run reuses that folder
without touching the network. When the hub cannot be reached and nothing is cached, the error
says so in one line (`BaseModelUnavailable`, a `RuntimeError` the command line reports plainly).

Overrides (documented in each task's TASK.md; `a2rl.tasks.base_model_name`): a task constructed with
`base_model=...` uses it; otherwise the task's option `base_model` (`-T base_model=`,
`[tasks.<id>]`, or the deprecated `task_base_models` / `A2RL_<TASK>_BASE_MODEL`), then the
setting `base_model` (`A2RL_BASE_MODEL`), then the spec's `default_base_model`. Tests set
`A2RL_BASE_MODEL=tiny-llama`.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from a2rl.settings import Settings

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: Files a causal LM checkpoint needs (weights, configs, tokenizer, chat template).
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
COMPLETE_MARKER = ".a2rl-complete"


class BaseModelUnavailable(RuntimeError):
    """The base model is neither cached nor downloadable (no network, unknown id...)."""


def is_hub_id(name: str) -> bool:
    """`owner/name` that is not an existing local path."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


def hub_cache_dir(settings: Settings) -> Path:
    return settings.home_dir / "models" / "hub"


def hub_model_dir(repo_id: str, settings: Settings) -> Path:
    """Where hub model `repo_id` lives once fetched."""
    return hub_cache_dir(settings) / repo_id.replace("/", "--")


def ensure_hub_model(
    repo_id: str, settings: Settings, *, revision: str | None = None,
    endpoint: str | None = None,
) -> Path:
    """The local snapshot of `repo_id`, downloading it on first use."""
    dest = hub_model_dir(repo_id, settings)
    if (dest / COMPLETE_MARKER).is_file() and (dest / "config.json").is_file():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id, revision=revision, local_dir=partial,
                          allow_patterns=ALLOW_PATTERNS, endpoint=endpoint)
    except Exception as exc:  # offline, unreachable, gated, unknown id: one clear line
        reason = (str(exc).splitlines() or [""])[0][:200]
        raise BaseModelUnavailable(
            f"base model {repo_id!r} is not cached in {dest} and could not be fetched from the "
            f"Hugging Face hub ({type(exc).__name__}: {reason}). "
            "Connect to the hub (and log in for gated models)."
        ) from None
    if not (partial / "config.json").is_file():
        raise BaseModelUnavailable(f"hub snapshot of {repo_id!r} has no config.json: "
                                   "not a transformers model")
    if dest.exists():
        shutil.rmtree(dest)
    partial.rename(dest)
    (dest / COMPLETE_MARKER).write_text(f"{repo_id}@{revision or 'main'}\n")
    return dest
