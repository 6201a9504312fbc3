"""Cheap checks of a submission's shape against the base model's, run in the server process.

Nothing here loads weights or builds a model: it reads `config.json` (size-capped) and the
safetensors headers (the 8-byte length and the JSON header, both capped) of the submission
and of the base model's own files, so a crafted checkpoint costs the server a few megabytes
at most, whatever it declares. What it asks for is loaded later, in a memory-limited process
(`a2rl.grading.validate`), and only once its shape is the base's.

The config rule: every key of the base's `config.json` must be in the submission's with an
equal value, and the submission may add no key, except a short allow-list of keys that do not
shape the model (`HARMLESS_KEYS`) and the keys transformers renames between versions
(`RENAMED_KEYS`, compared after both configs are read by transformers' own config class:
`check_normalized`, which the validating process runs first, since it needs transformers).
A deny-by-default rule, because a new transformers version may add a shaping key we never
heard of; the price is that a submission saved by another transformers version than the
base's may be refused with the key named, which the agent can fix.

The weights rule: the tensors (names, shapes) are exactly the base's, read from the base's own
safetensors files, so a tied `lm_head` the base omits must be omitted too; each dtype is the
base's or another floating dtype no wider than float32 (the reference scripts train and save
in float32 over a bfloat16 base; float64 and integer tensors are refused), so the weights cost
at most twice the base's bfloat16 bytes.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
#: the largest config.json / index / tokenizer_config.json parsed here (the base's are KBs)
MAX_JSON_BYTES = 4 << 20
#: a safetensors header longer than this is refused unread (a 1.5B model's is about 30 KB)
MAX_HEADER_BYTES = 8 << 20
#: keys that may differ from the base: they do not shape the model (the grader picks its own
#: dtype, cache and tokenizer); token ids are still checked to be ids of the vocabulary
HARMLESS_KEYS = frozenset({"dtype", "torch_dtype", "transformers_version", "_name_or_path",
                           "use_cache", "bos_token_id", "eos_token_id", "pad_token_id"})
#: keys transformers writes differently across versions (rope_theta went into
#: rope_parameters in 5.x, layer_types is derived): compared once normalized, not raw
RENAMED_KEYS = frozenset({"rope_theta", "rope_scaling", "rope_parameters", "layer_types",
                          "sliding_window"})
_TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")
_FLOAT_BYTES = {"BF16": 2, "F16": 2, "F32": 4}
_DTYPE_BYTES = {**_FLOAT_BYTES, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1,
                "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8, "BOOL": 1}
_SHARD = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")


class ShapeRefused(Exception):
    """A one-line reason the submission's shape is not the base's."""


#: How to fix any config refusal: said at the end of each
CONFIG_FIX = "keep the base model's config.json (save_pretrained from the base model does)"


def read_json(path: Path, shown: str, cap: int = MAX_JSON_BYTES) -> Any:
    size = path.stat().st_size
    if size > cap:
        raise ShapeRefused(f"{shown} is {size:,} bytes, more than the {cap:,} a checkpoint's "
                           "JSON file may have: save it with save_pretrained")
    try:
        return json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ShapeRefused(f"{shown} is not valid JSON ({exc}): save it with save_pretrained"
                           ) from None


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_config(copy_dir: Path, base_dir: Path, shown: str) -> None:
    """The submission's config.json describes the base's model (see the module's rule)."""
    base = read_json(base_dir / "config.json", "the base model's config.json")
    sub = read_json(copy_dir / "config.json", f"{shown}/config.json")
    if not isinstance(sub, dict):
        raise ShapeRefused(f"{shown}/config.json is not a JSON object: save with save_pretrained")
    for key, want in base.items():
        if key in HARMLESS_KEYS or key in RENAMED_KEYS:
            continue
        if key not in sub:
            raise ShapeRefused(f"{shown}/config.json lacks {key!r} (the base model's is "
                               f"{_short(want)}): {CONFIG_FIX}")
        if sub[key] != want:
            raise ShapeRefused(f"{shown}/config.json sets {key!r} to {_short(sub[key])}, the "
                               f"base model's is {_short(want)}: {CONFIG_FIX}")
    for key in sub:
        if key not in base and key not in HARMLESS_KEYS and key not in RENAMED_KEYS:
            raise ShapeRefused(f"{shown}/config.json adds {key!r}, which the base model's "
                               f"config does not have: {CONFIG_FIX}")
    vocab = base.get("vocab_size")
    for key in _TOKEN_ID_KEYS:
        ids = sub.get(key)
        ids = ids if isinstance(ids, list) else [ids]
        if len(ids) > 64 or not all(i is None or (type(i) is int and (
                not isinstance(vocab, int) or 0 <= i < vocab)) for i in ids):
            raise ShapeRefused(f"{shown}/config.json: {key} {_short(sub.get(key))} is not a "
                               f"token id of the vocabulary: {CONFIG_FIX}")


def check_normalized(copy_dir: Path, base_dir: Path, shown: str) -> None:
    """Both configs through transformers' config class, so renamed keys compare by meaning.
    Cheap once `check_config` passed: every size the class derives anything from is the
    base's. Run by the validating process before it loads anything, not by the server:
    importing transformers (and torch under it) cost each `a2rl serve` about 2.5 CPU-seconds
    at its first submission, and the validating process has them imported already."""
    from transformers import AutoConfig

    try:
        sub = AutoConfig.from_pretrained(copy_dir, trust_remote_code=False).to_dict()
    except Exception as exc:
        raise ShapeRefused(f"{shown}/config.json does not read as a transformers config "
                           f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                           f": {CONFIG_FIX}") from None
    base = AutoConfig.from_pretrained(base_dir, trust_remote_code=False).to_dict()
    for key in sorted(base.keys() | sub.keys()):
        if key not in HARMLESS_KEYS and base.get(key) != sub.get(key):
            raise ShapeRefused(f"{shown}/config.json sets {key!r} to {_short(sub.get(key))}, "
                               f"the base model's is {_short(base.get(key))}: {CONFIG_FIX}")


def weight_files(folder: Path, shown: str) -> list[Path]:
    """The safetensors files transformers loads from `folder`: model.safetensors when present
    (it wins over an index), else the shards its index names."""
    if (folder / SINGLE_FILE).is_file():
        return [folder / SINGLE_FILE]
    if not (folder / INDEX_FILE).is_file():
        raise ShapeRefused(f"{shown} has no model.safetensors: save with "
                           "model.save_pretrained(dir), which writes safetensors")
    index = read_json(folder / INDEX_FILE, f"{shown}/{INDEX_FILE}")
    names = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise ShapeRefused(f"{shown}/{INDEX_FILE} has no weight_map: save with save_pretrained")
    files = sorted(set(names.values()))
    for name in files:
        if not _SHARD.match(name) or not (folder / name).is_file():
            raise ShapeRefused(f"{shown}/{INDEX_FILE} names {name[:80]!r}, which is not a "
                               "shard file of this folder: save with save_pretrained")
    return [folder / n for n in files]


@dataclass
class Header:
    """What one safetensors file declares: {name: {dtype, shape, data_offsets}}, and the
    bytes its data needs against the bytes it has."""

    tensors: dict[str, Any]
    promised: int
    size: int
    shown: str

    def check_complete(self) -> None:
        if self.promised > self.size:
            raise ShapeRefused(f"{self.shown} is truncated: {self.size} bytes, the header "
                               f"promises {self.promised}")


def read_header(path: Path, shown: str, cap: int = MAX_HEADER_BYTES) -> Header:
    """The tensors a safetensors file declares, read from its length prefix and JSON header
    only; a header over `cap` is never read."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise ShapeRefused(f"{shown} is truncated: {size} bytes, not even a header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > cap:
            raise ShapeRefused(f"{shown} declares a {length:,}-byte header, more than the "
                               f"{cap:,} allowed: not a safetensors file save_pretrained wrote")
        if 8 + length > size:
            raise ShapeRefused(f"{shown} is truncated: {size} bytes, the header alone promises "
                               f"{8 + length}")
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ShapeRefused(f"{shown} has an unreadable safetensors header: save with "
                           "save_pretrained") from None
    if not isinstance(header, dict):
        raise ShapeRefused(f"{shown} has a safetensors header that is not an object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = 0
    for name, info in tensors.items():
        shape = info.get("shape") if isinstance(info, dict) else None
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        dtype = info.get("dtype") if isinstance(info, dict) else None
        if (not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(o) is int and o >= 0 for o in offsets)
                or dtype not in _DTYPE_BYTES):
            raise ShapeRefused(f"{shown}: tensor {name[:80]!r} has a malformed header entry")
        if offsets[1] - offsets[0] != math.prod(shape) * _DTYPE_BYTES[dtype]:
            raise ShapeRefused(f"{shown}: tensor {name[:80]!r} declares {offsets[1] - offsets[0]}"
                               f" bytes for shape {shape} {dtype}")
        end = max(end, offsets[1])
    return Header(tensors=tensors, promised=8 + length + end, size=size, shown=shown)


def _tensors(folder: Path, shown: str) -> tuple[dict[str, tuple[str, tuple[int, ...]]],
                                                list[Header]]:
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    headers = [read_header(p, f"{shown}/{p.name}") for p in weight_files(folder, shown)]
    for header in headers:
        for name, info in header.tensors.items():
            if name in out:
                raise ShapeRefused(f"{shown}: tensor {name[:80]!r} is in two weight files")
            out[name] = (info["dtype"], tuple(info["shape"]))
    return out, headers


def check_weights(copy_dir: Path, base_dir: Path, shown: str) -> int:
    """The submission's tensors are the base's (names, shapes, dtypes: see the module's
    rule); the number of parameters."""
    base, _ = _tensors(base_dir, "the base model")
    sub, headers = _tensors(copy_dir, shown)
    fix = "save the full model with the base's architecture (model.save_pretrained(dir))"
    missing = sorted(base.keys() - sub.keys())
    if missing:
        raise ShapeRefused(f"{shown} lacks {len(missing)} tensor(s) of the base model "
                           f"({missing[0][:80]!r} first): {fix}")
    extra = sorted(sub.keys() - base.keys())
    if extra:
        raise ShapeRefused(f"{shown} has {len(extra)} tensor(s) the base model does not have "
                           f"({extra[0][:80]!r} first): {fix}")
    for name, (dtype, shape) in sorted(base.items()):
        got_dtype, got_shape = sub[name]
        if got_shape != shape:
            raise ShapeRefused(f"{shown}: tensor {name!r} has shape {list(got_shape)[:8]}, the "
                               f"base model's is {list(shape)}: {fix}")
        if got_dtype != dtype and not (dtype in _FLOAT_BYTES and got_dtype in _FLOAT_BYTES):
            raise ShapeRefused(f"{shown}: tensor {name!r} is {got_dtype}, the base model's is "
                               f"{dtype}: save in {dtype}, bfloat16 or float32")
    for header in headers:  # after the shapes: a giant declared shape reads as one
        header.check_complete()
    return sum(math.prod(shape) for _, shape in base.values())
