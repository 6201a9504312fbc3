"""A tokenizer shaped like Qwen2.5's, built here (no download): byte-level BPE, `<|endoftext|>`
as the end of sequence and padding, `<|im_start|>`/`<|im_end|>` chat turns, and a
generation_config.json that ends a sequence as the Qwen2.5 *base* model's does
(`<|endoftext|>` only) or as the Instruct model's does (`<|im_end|>` too).

Why: the equivalence tests set the harness's vLLM calls beside our engines on text that holds
newlines, end-of-turn tokens and the end of sequence; the tiny model's character vocabulary
has no newline and its own end token (`</s>`). The BPE has no merges (one token per byte), so
every text round-trips and a prompt's token count is its length in bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
#: ChatML, as Qwen2.5's template renders a chat without tools or a default system message.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([ENDOFTEXT, IM_START, IM_END])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=ENDOFTEXT,
                                   pad_token=ENDOFTEXT, additional_special_tokens=[IM_START,
                                                                                   IM_END],
                                   clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_model_dir(folder: Path, *, instruct: bool = False) -> Path:
    """The tokenizer files and a generation_config.json (the base's end of sequence, or the
    Instruct model's two) in `folder`."""
    tokenizer = build_tokenizer()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    eos = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    ids = [tokenizer.convert_tokens_to_ids(IM_END), eos] if instruct else eos
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": ids}))
    return folder
