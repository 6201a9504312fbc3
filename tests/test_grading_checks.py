"""Checkpoint validation refusals, the near-copy flag, and the grader-owned copy."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from a2rl.grading import sha256_file, validate_checkpoint
from a2rl.settings import Settings
from a2rl.tasks import get_task
from a2rl.tools.checkpoint_copy import copy_checkpoint


def save_perturbed(base: Path, dest: Path, scale: float) -> Path:
    """A stand-in for a trained checkpoint: the base weights plus seeded noise."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base)
    if scale:
        torch.manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * scale * p.abs().mean())
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(base).save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    settings = Settings(home=tmp_path_factory.mktemp("home"))
    base = get_task("arith").base_model_dir(settings)
    out = tmp_path_factory.mktemp("ws") / "output"
    out.mkdir()
    trained = save_perturbed(base, out / "trained", 0.5)
    return {"base": base, "out": out, "trained": trained}


def check(env: dict[str, Path], path: Path):
    return validate_checkpoint(path, env["out"], env["base"])


def test_trained_checkpoint_is_accepted(env) -> None:
    res = check(env, env["trained"])
    assert res.ok, res.error
    assert res.l2_relative is not None and res.l2_relative > 0.1 and not res.near_copy
    assert res.n_params and res.n_params > 1_000_000
    # relative paths resolve against the workspace (the parent of output/)
    assert validate_checkpoint(Path("output/trained"), env["out"], env["base"]).ok


def test_near_copy_is_flagged(env) -> None:
    res = check(env, save_perturbed(env["base"], env["out"] / "near", 1e-5))
    assert res.ok and res.near_copy and res.l2_relative < 1e-3


def test_resaved_base_is_refused(env) -> None:
    res = check(env, save_perturbed(env["base"], env["out"] / "copy", 0.0))
    assert not res.ok
    assert res.error == "these weights are the base model's: train before submitting"


def test_adapter_only_is_refused(env) -> None:
    d = env["out"] / "adapter"
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    (d / "adapter_model.safetensors").write_bytes(b"")
    res = check(env, d)
    assert not res.ok and "adapter" in res.error and "merge_and_unload()" in res.error


def test_missing_tokenizer_is_refused(env) -> None:
    d = env["out"] / "notok"
    d.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copy(env["trained"] / name, d / name)
    res = check(env, d)
    assert not res.ok and "no tokenizer files" in res.error
    assert "tokenizer.save_pretrained" in res.error


def test_truncated_safetensors_is_refused(env) -> None:
    d = env["out"] / "truncated"
    shutil.copytree(env["trained"], d)
    weights = d / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    res = check(env, d)
    assert not res.ok and "model.safetensors" in res.error and "truncated" in res.error


def test_path_outside_output_is_refused(env, tmp_path) -> None:
    outside = shutil.copytree(env["trained"], tmp_path / "elsewhere")
    link = env["out"] / "sneaky"
    link.symlink_to(outside, target_is_directory=True)
    res = check(env, link)
    assert not res.ok and "outside output/" in res.error
    assert not check(env, outside).ok
    assert "not output/ itself" in check(env, env["out"]).error


def test_missing_path_is_refused(env) -> None:
    res = check(env, env["out"] / "nope")
    assert not res.ok and res.error.startswith("no such directory")


def test_other_vocabulary_is_refused(env) -> None:
    d = shutil.copytree(env["trained"], env["out"] / "vocab")
    tok = json.loads((d / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    vocab["@@"] = vocab.pop("@")
    (d / "tokenizer.json").write_text(json.dumps(tok))
    res = check(env, d)
    assert not res.ok and "different vocabulary" in res.error


def test_copy_checkpoint(env, tmp_path) -> None:
    dest = tmp_path / "store" / "sub-1"
    hashes = copy_checkpoint(env["trained"], dest)
    assert set(hashes) == {p.name for p in env["trained"].iterdir()}
    assert hashes["model.safetensors"] == sha256_file(env["trained"] / "model.safetensors")
    assert not list(dest.parent.glob(".*"))  # no partial copy left behind
    with pytest.raises(FileExistsError):
        copy_checkpoint(env["trained"], dest)


@pytest.mark.parametrize("plant,expect", [
    (lambda d, host: os.symlink(host, d / "extra.json"), "symlink"),
    (lambda d, host: os.symlink("/proc/self/environ", d / "environ"), "symlink"),
    (lambda d, host: os.link(host, d / "linked.bin"), "hard link"),
    (lambda d, host: os.mkfifo(d / "pipe"), "FIFO"),
    (lambda d, host: os.truncate(d / "sparse.bin", 2**31), "sparse files count"),
    (lambda d, host: (d / "a/b/c/d/e").mkdir(parents=True), "nested more than"),
    (lambda d, host: [(d / f"f{i}").touch() for i in range(30)], "more than 20 files"),
])
def test_copy_refuses_what_a_checkpoint_may_not_hold(env, tmp_path, plant, expect) -> None:
    from a2rl.tools.checkpoint_copy import CopyCaps, CopyRefused

    src = shutil.copytree(env["trained"], tmp_path / "ws" / "output" / "x")
    host = tmp_path / "host.txt"
    host.write_text("SECRET")
    (src / "sparse.bin").touch()
    plant(src, host)
    caps = CopyCaps(max_file_bytes=2**32, max_total_bytes=2**30, max_files=20, max_depth=3)
    dest = tmp_path / "copy"
    with pytest.raises(CopyRefused, match=expect):
        copy_checkpoint(tmp_path / "ws", dest, parts=("output", "x"), caps=caps)
    assert not dest.exists() and not list(tmp_path.glob(".copy*"))


def test_copy_does_not_follow_a_symlinked_checkpoint_folder(env, tmp_path) -> None:
    from a2rl.tools.checkpoint_copy import CopyRefused

    (tmp_path / "ws" / "output").mkdir(parents=True)
    os.symlink(env["trained"], tmp_path / "ws" / "output" / "x")
    with pytest.raises(CopyRefused, match="symlink"):
        copy_checkpoint(tmp_path / "ws", tmp_path / "copy", parts=("output", "x"))


def test_harmless_config_keys_and_bfloat16_weights_are_accepted(env) -> None:
    """What training scripts change without changing the model: use_cache off, a pad id, the
    dtype and transformers version, and weights saved in bfloat16 over a float32 base."""
    import torch
    from transformers import AutoModelForCausalLM

    d = env["out"] / "bf16"
    AutoModelForCausalLM.from_pretrained(env["trained"]).to(torch.bfloat16).save_pretrained(d)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(env["trained"] / name, d / name)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(use_cache=False, pad_token_id=3, transformers_version="4.57.0")
    (d / "config.json").write_text(json.dumps(cfg))
    res = check(env, d)
    assert res.ok and res.l2_relative and res.l2_relative > 0.1, res.error


@pytest.mark.parametrize("change,expect", [
    ({"pad_token_id": 10**6}, "not a token id"),
    ({"num_hidden_layers": 1500}, "'num_hidden_layers' to 1500"),
    ({"attention_bias": None}, "'attention_bias'"),
])
def test_config_changes_that_shape_the_model_are_refused(env, change, expect) -> None:
    d = shutil.copytree(env["trained"], env["out"] / f"cfg{len(list(env['out'].iterdir()))}")
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(change)
    (d / "config.json").write_text(json.dumps(cfg))
    res = check(env, d)
    assert not res.ok and expect in res.error, res.error


def test_a_header_over_the_cap_is_never_read(env) -> None:
    d = shutil.copytree(env["trained"], env["out"] / "bigheader")
    (d / "model.safetensors").write_bytes((2**40).to_bytes(8, "little") + b"{}")
    res = check(env, d)
    assert not res.ok and "declares a 1,099,511,627,776-byte header" in res.error, res.error


def test_pickle_weights_are_refused(env) -> None:
    d = shutil.copytree(env["trained"], env["out"] / "pickled")
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    res = check(env, d)
    assert not res.ok and "safe_serialization=True" in res.error


#: In a fresh interpreter, what the server and `a2rl create` do per submission and per run
#: before any loading process starts: the shape checks of a trained checkpoint, the baseline
#: cache key. Neither may import torch or transformers (each import cost every `a2rl serve` and
#: `a2rl run` about 2.5 CPU-seconds); both must still reach their usual verdict.
_SERVER_SIDE = """
import sys
from pathlib import Path
from a2rl.grading import baseline_key
from a2rl.grading.checks import _check_files, _check_shape
from a2rl.settings import Settings
from a2rl.tasks import get_task

trained, base, home = (Path(a) for a in sys.argv[1:4])
_check_files(trained, "output/trained", base)
n_params = _check_shape(trained, base, "output/trained")
task = get_task("arith")
key = baseline_key(task, base, Settings(home=home))
print(n_params, key, "torch" in sys.modules, "transformers" in sys.modules)
"""


def test_server_side_checks_and_the_baseline_key_import_no_torch(env) -> None:
    import subprocess
    import sys

    home = env["base"].parents[2]  # <home>/models/<name>
    p = subprocess.run([sys.executable, "-c", _SERVER_SIDE, str(env["trained"]),
                        str(env["base"]), str(home)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "A2RL_HOME": str(home)})
    assert p.returncode == 0, p.stderr[-2000:]
    n_params, key, torch_in, transformers_in = p.stdout.split()
    assert (torch_in, transformers_in) == ("False", "False")
    assert int(n_params) > 0
    # the same key as a process that has torch and transformers imported computes (this one)
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from a2rl.grading import baseline_key

    assert key == baseline_key(get_task("arith"), env["base"], Settings(home=home))
