"""Grading throughput: plain `generate` at batch 64 against the grader's engines, in one run.

A GSM8K-shaped workload (default 1,319 prompts of about 200 tokens, 256 new tokens; reduced on
CPU so that it finishes in a few minutes) on a model of a given shape with random weights (the
speed does not depend on them): `--shape tiny` is the tiny Llama of `tasks/tiny_model.py` with
room for longer positions, `--shape qwen2.5-1.5b` the real shape (for a GPU). EOS is disabled
in the saved generation config, so every engine generates the full length and tokens/s compare.

Each row runs in its own process, as the grader does (one evaluation per process), and reports
the seconds of one evaluation (load + generate), generated tokens/s, the fraction of outputs
identical to plain `generate`'s, and on CUDA the memory still allocated after `close()`. The
static engine runs twice: its first process fills the compile cache on disk (cold unless
`--cache-dir` already holds it), the second reads it (warm), as a later evaluation would.
On CPU each row runs `--repeat` times (default 3), interleaved with the others, and its best
run is kept: the build machines are shared, and a change of load would otherwise decide the
ratio.

    .venv/bin/python bench/grading.py [--shape tiny] [--n N] [--max-new-tokens T]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
PLAIN = "plain"


class RowResult(BaseModel):
    """What one engine process measured."""

    label: str
    engine: str
    engine_version: str
    batch: int
    n: int
    new_tokens: int
    load_s: float
    generate_s: float
    outputs_file: str
    cuda_allocated_mib_after_close: float | None = None
    cuda_peak_mib: float | None = None

    @property
    def eval_s(self) -> float:
        return self.load_s + self.generate_s

    @property
    def tokens_per_s(self) -> float:
        return self.n * self.new_tokens / self.generate_s


def shape_config(shape: str, vocab: int, max_positions: int, special: dict[str, int]) -> Any:
    if shape == "tiny":
        from transformers import LlamaConfig

        from a2rl.tasks.tiny_model import RECIPE

        cfg = {**RECIPE["config"], "max_position_embeddings": max_positions}
        return LlamaConfig(vocab_size=vocab, **cfg, **special)
    if shape == "qwen2.5-1.5b":
        from transformers import Qwen2Config

        return Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                           num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                           max_position_embeddings=max(32768, max_positions),
                           rope_theta=1_000_000.0, tie_word_embeddings=True, **special)
    raise SystemExit(f"unknown shape {shape!r}: tiny or qwen2.5-1.5b")


def build_model(shape: str, out: Path, max_positions: int, cuda: bool) -> None:
    """Random weights in `shape`, the tiny model's character tokenizer, EOS disabled."""
    import torch
    from transformers import AutoModelForCausalLM

    from a2rl.tasks.tiny_model import build_tokenizer

    tok = build_tokenizer()
    tok.model_max_length = max_positions
    special = {"pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
               "eos_token_id": tok.eos_token_id}
    config = shape_config(shape, len(tok), max_positions, special)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if cuda else torch.float32
    with torch.device("cuda" if cuda else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None  # full-length generations: comparable tok/s
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)


def make_prompts(n: int, mean_tokens: int, seed: int = 0) -> list[str]:
    """About `mean_tokens` characters each (one token per character), spread +-25% like
    GSM8K's; no spaces, which some tokenizer classes drop."""
    rng = random.Random(seed)
    chars = string.ascii_letters + string.digits + ".,?+-*/="
    spread = max(1, mean_tokens // 4)
    return ["".join(rng.choices(chars, k=max(1, mean_tokens + rng.randint(-spread, spread))))
            for _ in range(n)]


def run_row(args: argparse.Namespace) -> RowResult:
    """Load one engine, generate, close it (in a child process unless `--same-process`)."""
    import torch

    from a2rl.grading.engine import TransformersEngine
    from a2rl.grading.engine_static import StaticCacheEngine

    cuda = torch.cuda.is_available()
    prompts = make_prompts(args.n, args.prompt_tokens)
    model_dir = Path(args.model_dir)
    started = time.perf_counter()
    engine: Any
    if args.row == PLAIN or args.row == "transformers":
        engine = TransformersEngine(model_dir, batch_size=args.batch)
    elif args.row.startswith("static"):
        engine = StaticCacheEngine(model_dir, batch_size=args.batch,
                                   compile=True if args.row == "static-compiled" else None,
                                   compile_cache=Path(args.cache_dir))
    elif args.row == "vllm":
        from a2rl.grading.engine_vllm import VllmEngine

        engine = VllmEngine(model_dir, ignore_eos=True,
                            max_model_len=args.prompt_tokens * 2 + args.max_new_tokens)
    else:
        raise SystemExit(f"unknown row {args.row!r}")
    loaded = time.perf_counter()
    outputs = engine.generate(prompts, max_new_tokens=args.max_new_tokens)
    if cuda:
        torch.cuda.synchronize()
    done = time.perf_counter()
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    engine.close()
    after = torch.cuda.memory_allocated() / 2**20 if cuda else None
    out_file = Path(args.work) / (re.sub(r"\W+", "_", args.label) + ".json")
    out_file.write_text(json.dumps(outputs))
    return RowResult(label=args.label, engine=engine.engine_name,
                     engine_version=engine.engine_version, batch=args.batch, n=args.n,
                     new_tokens=args.max_new_tokens, load_s=loaded - started,
                     generate_s=done - loaded, outputs_file=str(out_file),
                     cuda_allocated_mib_after_close=after, cuda_peak_mib=peak)


def spawn(args: argparse.Namespace, row: str, label: str, batch: int) -> RowResult:
    if args.same_process:
        return run_row(argparse.Namespace(**{**vars(args), "row": row, "label": label,
                                             "batch": batch}))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--row", row, "--label", label,
           "--batch", str(batch), "--n", str(args.n), "--prompt-tokens", str(args.prompt_tokens),
           "--max-new-tokens", str(args.max_new_tokens), "--model-dir", args.model_dir,
           "--cache-dir", args.cache_dir, "--work", args.work]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"row {label} failed:\n{p.stderr[-3000:]}")
    return RowResult.model_validate_json(p.stdout.strip().splitlines()[-1])


def rows_to_run(args: argparse.Namespace, cuda: bool) -> list[tuple[str, str, int]]:
    """(row, label, batch): the baseline first, then each engine available here."""
    from a2rl.grading.engine_select import vllm_available

    rows = [(PLAIN, f"plain generate, batch {args.baseline_batch}", args.baseline_batch)]
    if args.batch != args.baseline_batch:
        rows.append(("transformers", f"plain generate, batch {args.batch}", args.batch))
    if not cuda:
        rows.append(("static", f"static cache (eager), batch {args.batch}", args.batch))
    if cuda:
        rows.append(("static", f"static cache (compiled), batch {args.batch}, 1st process",
                     args.batch))
        rows.append(("static", f"static cache (compiled), batch {args.batch}, 2nd process "
                     "(warm compile cache)", args.batch))
    if args.compile_on_cpu and not cuda:
        rows.append(("static-compiled", f"static cache (compiled), batch {args.batch}, "
                     "1st process", args.batch))
        rows.append(("static-compiled", f"static cache (compiled), batch {args.batch}, "
                     "2nd process (warm compile cache)", args.batch))
    if cuda and vllm_available():
        rows.append(("vllm", "vLLM", args.batch))
    return rows


def same_fraction(a_file: str, b_file: str) -> float:
    a, b = json.loads(Path(a_file).read_text()), json.loads(Path(b_file).read_text())
    return sum(x == y for x, y in zip(a, b, strict=True)) / max(1, len(a))


def fmt_mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def main_run(args: argparse.Namespace) -> None:
    import torch

    cuda = torch.cuda.is_available()
    args.n = args.n or (1319 if cuda else 128)
    args.max_new_tokens = args.max_new_tokens or (256 if cuda else 64)
    args.batch = args.batch or (128 if cuda else 64)
    args.repeat = args.repeat or (1 if cuda else 3)
    with tempfile.TemporaryDirectory(prefix="a2rl-bench-grading-") as tmp:
        args.work = tmp
        args.model_dir = str(Path(tmp) / "model")
        args.cache_dir = args.cache_dir or str(Path(tmp) / "torchinductor")
        positions = 2 * args.prompt_tokens + args.max_new_tokens + 64
        t = time.perf_counter()
        build_model(args.shape, Path(args.model_dir), positions, cuda)
        device = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
        print(f"# {device}; shape {args.shape}; {args.n} prompts of ~{args.prompt_tokens} "
              f"tokens, {args.max_new_tokens} new tokens; best of {args.repeat} interleaved "
              f"runs per row (model built in {time.perf_counter() - t:.1f} s)")
        rows = rows_to_run(args, cuda)
        runs: list[list[RowResult]] = [[] for _ in rows]
        for rep in range(args.repeat):  # interleaved, so that a change of load hits every row
            for i, (row, label, batch) in enumerate(rows):
                if rep == 0 or "1st process" not in label:  # a cold compile happens once
                    runs[i].append(spawn(args, row, label, batch))
        results = [min(r, key=lambda x: x.generate_s) for r in runs]
        same = [same_fraction(results[0].outputs_file, r.outputs_file) for r in results]
    base = results[0]
    print("| engine | batch | generated tok/s | s / evaluation (load + generate) | x plain b64 "
          "tok/s | x plain b64 s/eval | same outputs as plain | MiB allocated after close |")
    print("|---|---|---|---|---|---|---|---|")
    for r, agree in zip(results, same, strict=True):
        print(f"| {r.label} | {r.batch} | {r.tokens_per_s:,.0f} | {r.eval_s:.2f} "
              f"({r.load_s:.2f} + {r.generate_s:.2f}) | {r.tokens_per_s / base.tokens_per_s:.2f} "
              f"| {base.eval_s / r.eval_s:.2f} | "
              f"{agree:.1%} "
              f"| {fmt_mib(r.cuda_allocated_mib_after_close)} |")
    for r in results:
        print(f"# {r.label}: {r.engine} ({r.engine_version}); CUDA peak "
              f"{fmt_mib(r.cuda_peak_mib)} MiB")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="tiny", choices=["tiny", "qwen2.5-1.5b"])
    parser.add_argument("--n", type=int, default=0, help="prompts (default 1319, CPU 128)")
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=0, help="default 256, CPU 64")
    parser.add_argument("--baseline-batch", type=int, default=64)
    parser.add_argument("--batch", type=int, default=0, help="engines' batch (128, CPU 64)")
    parser.add_argument("--repeat", type=int, default=0,
                        help="interleaved runs per row, best kept (default 1, CPU 3)")
    parser.add_argument("--cache-dir", default="", help="compile cache (default: fresh)")
    parser.add_argument("--compile-on-cpu", action="store_true",
                        help="also time the compiled static cache on CPU (slow)")
    parser.add_argument("--same-process", action="store_true",
                        help="run the rows in this process (a quick smoke run, not a figure)")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--label", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.row:
        print(run_row(args).model_dump_json())
    else:
        main_run(args)


if __name__ == "__main__":
    main()
