"""The embedded default base model: a tiny Llama built locally from a recipe, no downloads.

Why a recipe and not a file: the harness must run offline and in CI, so the base model is
*built* (deterministically, from `torch.manual_seed`) and cached under
`$A2RL_HOME/models/tiny-llama-<hash of the recipe>`. Changing the recipe changes the hash, so
an old cache is never mistaken for the new model. The build happens in a temporary directory
that is renamed into place, so a crash or a concurrent builder never leaves half a model.

The tokenizer is character-level (a `tokenizers` WordLevel model over printable ASCII) wrapped
in `PreTrainedTokenizerFast`, with a small chat template. The Llama architecture is used on
purpose: with `model_type="qwen2"`, `AutoTokenizer` silently swaps in a BPE tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import string
import tempfile
from pathlib import Path
from typing import Any

from a2rl.settings import Settings

#: Special tokens, in vocabulary order (ids 0..n-1).
PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")

#: The chat template: `<s><|user|>PROBLEM</s><|assistant|>ANSWER</s>`. Each turn ends with EOS,
#: so generation stops by itself after the answer. `{% generation %}` marks assistant text for
#: trainers that compute assistant-only loss.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}"
    "{% else %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + eos_token }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

#: Everything that defines the model. Its hash names the cache directory.
RECIPE: dict[str, Any] = {
    "name": "tiny-llama",
    "seed": 0,
    "config": {
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 128,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "initializer_range": 0.02,
    },
    "chars": string.printable[:95],  # digits, letters, punctuation, space (no tabs/newlines)
    "specials": [PAD, UNK, BOS, EOS, *ROLE_TOKENS],
    "chat_template": CHAT_TEMPLATE,
    "format": 1,
}


def recipe_hash() -> str:
    """Short, stable hash of `RECIPE` (names the cache directory)."""
    blob = json.dumps(RECIPE, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def build_tokenizer() -> Any:
    """A character-level fast tokenizer: one token per character, special tokens kept whole."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(RECIPE["specials"])}
    for ch in RECIPE["chars"]:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(RECIPE["specials"]))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=list(ROLE_TOKENS),
        clean_up_tokenization_spaces=False,
        model_max_length=RECIPE["config"]["max_position_embeddings"],
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer: Any) -> Any:
    """The randomly initialised Llama, deterministic given `RECIPE['seed']`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(RECIPE["seed"])
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **RECIPE["config"],
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def model_dir(settings: Settings) -> Path:
    return settings.home_dir / "models" / f"{RECIPE['name']}-{recipe_hash()}"


def ensure_base_model(settings: Settings) -> Path:
    """Build the tiny base model once and return its cached directory."""
    final = model_dir(settings)
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        tokenizer = build_tokenizer()
        model = build_model(tokenizer)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "a2rl_recipe.json").write_text(json.dumps(RECIPE, indent=1, sort_keys=True))
        try:
            os.rename(tmp, final)
        except OSError:  # another process won the race; its copy is identical
            if not (final / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
