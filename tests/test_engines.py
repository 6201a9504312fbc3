"""Generation engines: greedy agreement, selection and override, the GPU memory check, the
vLLM adapter (on a fake `vllm`), and a smoke run of `bench/grading.py`.

The compiled static-cache path is not run here: on 2 CPU cores a cold compile of the tiny
model's decode step takes 30-90 s (see bench/RESULTS.md), over this file's time budget, and the
engine compiles on CUDA only; the tests exercise its eager static cache. The compiled path's
agreement with plain `generate` is a column of `bench/grading.py`'s table, which is where a GPU
run measures it (a GPU-only test would be a skip in CI).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from a2rl.grading import evaluate
from a2rl.grading.baseline import baseline_key
from a2rl.grading.engine import TransformersEngine
from a2rl.grading.engine_select import (
    CPU_AUTO,
    EngineUnavailable,
    build_engine,
    choose_engine,
    chosen_engine,
    engine_identity,
)
from a2rl.grading.engine_static import StaticCacheEngine, bucket_length, row_bucket
from a2rl.grading.gpu_memory import (
    GIB,
    GpuMemoryUnavailable,
    estimate_need,
    kv_cache_bytes,
    wait_for_memory,
    weights_bytes,
)
from a2rl.settings import Settings, load_settings
from a2rl.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]

#: Prompts of very different lengths, so that batches mix short and long (padding differs
#: between the engines) and generations run long enough to drift if anything disagreed.
MIXED_PROMPTS = [
    "1+1", "12*34", "a much longer prompt about nothing in particular, 98765-4321",
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "7-8"}],
    "x" * 60, "The quick brown fox jumps over the lazy dog.", "0", "99+99+99+99",
]


@pytest.fixture(scope="module")
def base_dir(a2rl_home: Path) -> Path:
    return get_task("arith").base_model_dir(Settings(home=a2rl_home))


def test_static_engine_equals_plain_on_the_arith_task(a2rl_home: Path, base_dir: Path) -> None:
    """Same outputs and score on the arith dev split; provenance names the engine used."""
    task = get_task("arith")
    plain = evaluate(task, base_dir, "dev",
                     Settings(home=a2rl_home, grading={"engine": "transformers"}))
    static = evaluate(task, base_dir, "dev", Settings(home=a2rl_home, grading={"engine": "static"}))
    assert [it.output for it in static.items] == [it.output for it in plain.items]
    assert static.score == plain.score
    assert plain.provenance["engine"] == "transformers"
    assert static.provenance["engine"] == "transformers-static"
    assert "static cache, eager" in static.provenance["engine_version"]


def test_static_engine_equals_plain_on_mixed_prompts(base_dir: Path) -> None:
    prompts = MIXED_PROMPTS * 2
    plain = TransformersEngine(base_dir, batch_size=6).generate(prompts, 32, stop=["</s>"])
    static = StaticCacheEngine(base_dir, batch_size=6).generate(prompts, 32, stop=["</s>"])
    assert static == plain
    assert any(len(out) > 10 for out in plain)  # the comparison covers long generations


def test_close_releases_the_model(base_dir: Path) -> None:
    engine = StaticCacheEngine(base_dir, batch_size=4)
    engine.close()
    assert engine.model is None


def test_buckets_keep_shapes_few() -> None:
    assert [bucket_length(n, 256) for n in (1, 64, 65, 200, 250)] == [64, 64, 128, 256, 256]
    assert bucket_length(100, 8, max_positions=128) == 120  # clamped to the position limit
    assert bucket_length(125, 8, max_positions=128) == 125  # never shorter than the prompt
    assert [row_bucket(n, 64) for n in (1, 3, 33, 64)] == [1, 4, 64, 64]
    assert row_bucket(100, 64) == 100


@pytest.mark.parametrize(("requested", "cuda", "vllm", "expected"), [
    ("auto", False, False, CPU_AUTO),
    ("auto", False, True, CPU_AUTO),  # vLLM without CUDA is never chosen
    ("auto", True, False, "static"),
    ("auto", True, True, "vllm"),
    ("transformers", True, True, "transformers"),
    ("static", False, False, "static"),
    ("vllm", True, True, "vllm"),
])
def test_choose_engine(requested: str, cuda: bool, vllm: bool, expected: str) -> None:
    assert choose_engine(requested, cuda=cuda, vllm=vllm) == expected


def test_forcing_an_unavailable_engine_is_a_clear_error() -> None:
    with pytest.raises(EngineUnavailable, match="vLLM is not installed"):
        choose_engine("vllm", cuda=True, vllm=False)
    with pytest.raises(EngineUnavailable, match="needs a CUDA GPU"):
        choose_engine("vllm", cuda=False, vllm=True)
    with pytest.raises(EngineUnavailable, match="unknown grading.engine"):
        choose_engine("fast", cuda=False, vllm=False)


def test_engine_setting_from_the_environment(tmp_path: Path) -> None:
    env = {"A2RL_HOME": str(tmp_path), "A2RL_GRADING__ENGINE": "transformers"}
    settings, sources = load_settings(environ=env)
    assert settings.grading.engine == "transformers" and sources["grading.engine"] == "env"
    assert load_settings(environ={"A2RL_HOME": str(tmp_path)})[0].grading.engine == "auto"
    # any name loads (a package may add engines); which exist is the registry's to say, when
    # the engine is chosen (and `a2rl` refuses an unknown one at load: tests/test_cli_user.py)
    with pytest.raises(EngineUnavailable, match="unknown grading.engine 'fast'"):
        chosen_engine(Settings(grading={"engine": "fast"}))
    with pytest.raises(ValidationError):
        Settings(grading={"engine": "Fast Engine"})


def test_baseline_key_follows_the_engine(a2rl_home: Path, base_dir: Path) -> None:
    task = get_task("arith")
    keys = {baseline_key(task, base_dir, Settings(home=a2rl_home, grading={"engine": e}))
            for e in ("transformers", "static")}
    assert len(keys) == 2
    assert engine_identity("static", cuda=True)[1].endswith("compiled, buckets of 64")


# --- GPU memory check (the query is injected: no GPU needed) ---------------------------------

def _checkpoint(tmp_path: Path, dtype: str, size: int) -> Path:
    config = {"dtype": dtype, "num_hidden_layers": 28, "num_attention_heads": 12,
              "num_key_value_heads": 2, "hidden_size": 1536}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with (tmp_path / "model.safetensors").open("wb") as f:
        f.truncate(size)
    return tmp_path


def test_memory_estimate(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path, "float32", 4 * GIB)
    assert weights_bytes(ckpt) == 2 * GIB  # fp32 on disk, bf16 once loaded
    # Qwen2.5-1.5B: 28 layers x 2 (k, v) x 2 kv heads x 128 dims x 2 bytes per token
    assert kv_cache_bytes(ckpt, batch_size=1, max_tokens=1) == 28 * 2 * 2 * 128 * 2
    need = estimate_need(ckpt, batch_size=64, max_tokens=1280)
    assert 2 * GIB + kv_cache_bytes(ckpt, 64, 1280) < need < 6 * GIB


class FakeDevice:
    """A GPU whose free memory grows by `step` at every query (the agent's job shrinking)."""

    def __init__(self, free: int, total: int, step: int = 0) -> None:
        self.free, self.total, self.step, self.queries = free, total, step, 0

    def __call__(self) -> tuple[int, int]:
        self.queries += 1
        free = self.free
        self.free += self.step
        return free, self.total


def _fake_clock() -> tuple[Any, Any]:
    now = [0.0]
    return (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))


def test_wait_for_memory_waits_then_proceeds() -> None:
    clock, sleep = _fake_clock()
    lines: list[str] = []
    fit = wait_for_memory(3 * GIB, FakeDevice(1 * GIB, 80 * GIB, step=GIB), wait_s=60,
                          poll_s=5, sleep=sleep, clock=clock, report=lines.append)
    assert fit.fits and fit.free_bytes == 3 * GIB
    assert lines[0] == "waiting for GPU memory: need 3.0 GiB, free 1.0 GiB"


def test_wait_for_memory_gives_up_with_a_clear_message() -> None:
    clock, sleep = _fake_clock()
    with pytest.raises(GpuMemoryUnavailable, match=r"need 3\.0 GiB, free 1\.0 GiB.*gave up"):
        wait_for_memory(3 * GIB, FakeDevice(GIB, 80 * GIB), wait_s=30, sleep=sleep,
                        clock=clock, report=lambda _: None)
    with pytest.raises(GpuMemoryUnavailable, match="cannot fit on this GPU"):
        wait_for_memory(90 * GIB, FakeDevice(GIB, 80 * GIB), report=lambda _: None)


def test_build_engine_checks_memory_before_loading(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path, "bfloat16", 3 * GIB)  # nothing loadable: must not get there
    with pytest.raises(GpuMemoryUnavailable, match="waiting for GPU memory"):
        build_engine("static", ckpt, Settings(home=tmp_path), batch_size=64, max_new_tokens=256,
                     chat_template=None, cuda=True, memory_query=FakeDevice(GIB, 80 * GIB),
                     memory_wait_s=0)


def test_worker_reports_missing_memory_plainly(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from a2rl.grading import worker

    def no_memory(spec: Any) -> str:
        raise GpuMemoryUnavailable("waiting for GPU memory: need 9.0 GiB, free 1.0 GiB")

    monkeypatch.setattr(worker, "run_spec", no_memory)
    spec = {"task_id": "arith", "checkpoint_dir": "/nonexistent", "split": "dev"}
    assert worker.main(["--spec", json.dumps(spec)]) == 3
    assert capsys.readouterr().err.strip() == "waiting for GPU memory: need 9.0 GiB, free 1.0 GiB"


# --- vLLM adapter on a fake module (vLLM cannot be installed on the CPU machines) ------------

def test_vllm_engine_on_a_fake_vllm(monkeypatch: pytest.MonkeyPatch, base_dir: Path) -> None:
    calls: dict[str, Any] = {}

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            calls["params"] = kwargs

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            calls["llm"] = kwargs

        def generate(self, prompts: list[dict[str, list[int]]], params: Any,
                     use_tqdm: bool) -> list[Any]:
            calls["prompts"] = prompts
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(
                token_ids=calls["answer"])]) for _ in prompts]

    fake = types.ModuleType("vllm")
    fake.__version__ = "0.0-fake"  # type: ignore[attr-defined]
    fake.LLM, fake.SamplingParams = LLM, SamplingParams  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    from a2rl.grading.engine_vllm import VllmEngine

    engine = VllmEngine(base_dir, gpu_memory_utilization=0.5)
    calls["answer"] = engine.tokenizer("42</s>junk<pad>", add_special_tokens=False)["input_ids"]
    out = engine.generate(["1+2", "3*4"], max_new_tokens=8, stop=["</s>"])
    assert out == ["42", "42"]  # decoded and cut exactly as the transformers engines do
    assert calls["params"]["temperature"] == 0.0 and calls["params"]["max_tokens"] == 8
    assert calls["params"]["stop"] == ["</s>"] and calls["llm"]["gpu_memory_utilization"] == 0.5
    assert calls["llm"]["generation_config"] == "vllm"  # never the checkpoint's own
    first = engine.tokenizer.decode(calls["prompts"][0]["prompt_token_ids"])
    assert first == "<s><|user|>1+2</s><|assistant|>"  # rendered with the chat template
    assert engine.engine_name == "vllm" and engine.engine_version.startswith("vllm 0.0-fake")


# --- the benchmark ------------------------------------------------------------------------

def test_bench_grading_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny workload through `bench/grading.py`, in this process (the real runs put every
    row in its own process, as the grader does)."""
    spec = importlib.util.spec_from_file_location("bench_grading", ROOT / "bench" / "grading.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--n", "6", "--prompt-tokens", "24", "--max-new-tokens", "4", "--repeat", "1",
                "--same-process"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| engine |")
    assert any(r.startswith("| plain generate, batch 64 |") and "| 1.00 |" in r for r in rows)
    assert any(r.startswith("| static cache (eager)") and "| 100.0% |" in r for r in rows)


def test_engine_version_from_metadata_or_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline key's engine version, read without importing torch or transformers, is
    what their modules say; a module installed without metadata is asked itself."""
    import importlib.metadata

    import torch
    import transformers

    from a2rl.grading.engine import transformers_engine_version

    want = f"transformers {transformers.__version__}, torch {torch.__version__}"
    assert transformers_engine_version() == want

    def no_metadata(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    assert transformers_engine_version() == want


def test_cuda_is_asked_of_torch_where_a_gpu_driver_could_be() -> None:
    """The shortcut answers only where no GPU driver's file exists: with one present (here a
    stand-in file that exists), torch is imported and decides, as before."""
    import subprocess
    import sys

    code = ("import sys; from a2rl.grading import engine_select as e; "
            "e.GPU_DRIVER_FILES = ('/dev/null',); "
            "print(e.cuda_available(), 'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    import torch

    assert p.stdout.split() == [str(torch.cuda.is_available()), "True"]
