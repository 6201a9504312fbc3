"""Every GPU check a2rl needs, in one run (the entry point is `bench/gpu_check.sh`).

1. The grading engines on the Qwen2.5-1.5B shape with random weights built from a config (no
   download; `bench/grading.py` builds it, EOS disabled so every engine generates the full
   length): generated tokens/s, seconds per GSM8K-sized evaluation (1,319 prompts of about 200
   tokens, 256 new tokens), the share of greedy bf16 outputs identical to plain `generate`'s,
   and the CUDA memory still allocated after `close()`. Plain `generate` (the baseline, about
   15 decode steps/s whatever the batch) runs on the first `--plain-n` prompts only, so that
   the check fits in 8 minutes; its s/evaluation is then extrapolated and marked so. The
   static-cache engine runs twice on all prompts, each in its own process as the grader runs
   it: cold compile cache, then warm. vLLM runs too when it is installed.
2. What `engine_select` picks by itself here (`auto`).
3. One `arith` evaluation through the real grader worker (`grading.queue.run_worker`: a
   subprocess of `python -m a2rl.grading.worker`) on the task's own base model, on CUDA when
   there is one.

Writes `gpu_check.json` under `--out` and prints a summary. `--smoke`: tiny shapes on CPU in
seconds (tests/test_gpu_check.py runs it), which checks the script, never the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GSM8K_PROMPTS, GSM8K_NEW_TOKENS, GSM8K_PROMPT_TOKENS = 1319, 256, 200


def _bench_grading() -> Any:
    """bench/grading.py (a script, not a package; loaded by path so that the repository's own
    `grading/` folder cannot shadow it)."""
    spec = importlib.util.spec_from_file_location("a2rl_bench_grading",
                                                  ROOT / "bench" / "grading.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prefix_agreement(a_file: str, b_file: str) -> tuple[float, int]:
    """Share of identical outputs over the prompts both rows generated (a prefix)."""
    a, b = json.loads(Path(a_file).read_text()), json.loads(Path(b_file).read_text())
    n = min(len(a), len(b))
    return (sum(x == y for x, y in zip(a[:n], b[:n], strict=True)) / n if n else 0.0), n


def _row_figures(r: Any, full_n: int, agreement: tuple[float, int] | None) -> dict[str, Any]:
    per_eval = r.load_s + r.generate_s * full_n / r.n
    return {
        "label": r.label, "engine": r.engine, "engine_version": r.engine_version,
        "batch": r.batch, "prompts": r.n, "new_tokens": r.new_tokens,
        "load_s": round(r.load_s, 3), "generate_s": round(r.generate_s, 3),
        "generated_tokens_per_s": round(r.tokens_per_s, 1),
        "s_per_evaluation": round(per_eval, 2),  # of `prompts` of the check (GSM8K: 1,319)
        "s_per_evaluation_is": "measured" if r.n == full_n else
        f"extrapolated from {r.n} prompts",
        "same_outputs_as_plain": None if agreement is None else round(agreement[0], 4),
        "compared_outputs": None if agreement is None else agreement[1],
        "cuda_allocated_mib_after_close": r.cuda_allocated_mib_after_close,
        "cuda_peak_mib": r.cuda_peak_mib,
    }


def check_engines(args: argparse.Namespace, cuda: bool, work: Path) -> dict[str, Any]:
    bg = _bench_grading()
    from a2rl.grading.engine_select import vllm_available

    shape = "tiny" if args.smoke else "qwen2.5-1.5b"
    n = args.n or (8 if args.smoke else GSM8K_PROMPTS)
    plain_n = min(n, args.plain_n or (n if args.smoke else 128))
    new_tokens = args.max_new_tokens or (8 if args.smoke else GSM8K_NEW_TOKENS)
    prompt_tokens = 16 if args.smoke else GSM8K_PROMPT_TOKENS
    batch = args.batch or (4 if args.smoke else 128)
    model_dir = work / "model"
    started = time.perf_counter()
    bg.build_model(shape, model_dir, 2 * prompt_tokens + new_tokens + 64, cuda)
    built_s = time.perf_counter() - started
    base = argparse.Namespace(n=n, prompt_tokens=prompt_tokens, max_new_tokens=new_tokens,
                              model_dir=str(model_dir), cache_dir=str(work / "torchinductor"),
                              work=str(work), same_process=args.smoke)
    rows: list[tuple[str, str, int]] = [
        ("transformers", f"plain generate, batch {batch}", plain_n)]
    if cuda:
        rows += [("static", f"static cache (compiled), batch {batch}, 1st process (cold "
                  "compile cache)", n),
                 ("static", f"static cache (compiled), batch {batch}, 2nd process (warm "
                  "compile cache)", n)]
    else:
        rows.append(("static", f"static cache (eager), batch {batch}", n))
    if cuda and vllm_available():
        rows.append(("vllm", "vLLM", n))
    results = []
    for row, label, row_n in rows:
        ns = argparse.Namespace(**{**vars(base), "n": row_n})
        results.append(bg.spawn(ns, row, label, batch))
        print(f"# {label}: {results[-1].tokens_per_s:,.0f} generated tok/s", flush=True)
    plain = results[0]
    figures = [_row_figures(plain, n, None)]
    figures += [_row_figures(r, n, _prefix_agreement(plain.outputs_file, r.outputs_file))
                for r in results[1:]]
    for f in figures[1:]:
        f["x_plain_tokens_per_s"] = round(f["generated_tokens_per_s"]
                                          / figures[0]["generated_tokens_per_s"], 2)
    return {"shape": shape, "prompts": n, "plain_prompts": plain_n, "new_tokens": new_tokens,
            "prompt_tokens": prompt_tokens, "model_build_s": round(built_s, 2), "rows": figures}


def check_engine_select(cuda: bool) -> dict[str, Any]:
    from a2rl.grading.engine_select import choose_engine, engine_identity, vllm_available

    vllm = vllm_available()
    kind = choose_engine("auto", cuda=cuda, vllm=vllm)
    name, version = engine_identity(kind, cuda=cuda)
    return {"cuda": cuda, "vllm_installed": vllm, "auto_chooses": kind, "engine_name": name,
            "engine_version": version}


def check_arith_worker(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One evaluation exactly as the grader runs it: `run_worker` on a JSON spec."""
    from a2rl.grading.queue import run_worker
    from a2rl.settings import Settings
    from a2rl.tasks import get_task

    settings = Settings(home=work / "a2rl-home")
    split = "dev" if args.smoke else "test"
    base = get_task("arith").base_model_dir(settings)
    # The smoke run caps generation: it checks the path, not the score.
    spec = {"task_id": "arith", "checkpoint_dir": str(base), "split": split,
            "settings": {"home": str(settings.home),
                         **({"grading": {"max_new_tokens": 4}} if args.smoke else {})}}
    result, error, seconds = run_worker(spec, timeout_s=300.0)
    out: dict[str, Any] = {"split": split, "seconds": round(seconds, 2), "error": error,
                           "base_model": str(base.name)}
    if result is not None:
        out.update(score=result.score, ci=[result.ci_low, result.ci_high],
                   n_items=result.n_items, engine=result.provenance.get("engine"),
                   engine_version=result.provenance.get("engine_version"),
                   load_s=result.metrics.get("load_s"),
                   generate_s=result.metrics.get("generate_s"))
    return out


def _step(doc: dict[str, Any], name: str, fn: Any, *fn_args: Any) -> None:
    """Run one check; a failure is recorded with its traceback and the other checks go on."""
    started = time.perf_counter()
    try:
        doc[name] = {"ok": True, **fn(*fn_args)}
    except BaseException as exc:  # SystemExit from a failed engine row included
        doc[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000],
                     "traceback": traceback.format_exc()[-4000:]}
    doc[name]["check_s"] = round(time.perf_counter() - started, 2)
    if name == "arith_worker" and doc[name].get("error"):
        doc[name]["ok"] = False


def summary(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = [f"GPU check on {env['device']} (torch {env['torch']}, transformers "
             f"{env['transformers']}){' [smoke]' if doc['smoke'] else ''}, {doc['total_s']} s"]
    eng = doc["engines"]
    if eng["ok"]:
        lines.append(f"engines: {eng['shape']} shape, {eng['prompts']} prompts of about "
                     f"{eng['prompt_tokens']} tokens, {eng['new_tokens']} new tokens")
        lines.append(f"| engine | batch | generated tok/s | s / evaluation of {eng['prompts']} "
                     "prompts | same outputs as plain | MiB allocated after close |")
        lines.append("|---|---|---|---|---|---|")
        for r in eng["rows"]:
            agree = "baseline" if r["same_outputs_as_plain"] is None else \
                f"{r['same_outputs_as_plain']:.1%} of {r['compared_outputs']}"
            per_eval = f"{r['s_per_evaluation']:.1f}" + (
                "" if r["s_per_evaluation_is"] == "measured" else " (extrapolated)")
            mib = r["cuda_allocated_mib_after_close"]
            lines.append(f"| {r['label']} | {r['batch']} | {r['generated_tokens_per_s']:,.0f} "
                         f"| {per_eval} | {agree} | {'n/a' if mib is None else f'{mib:,.0f}'} |")
    else:
        lines.append(f"engines: FAILED: {eng['error']}")
    sel = doc["engine_select"]
    lines.append(f"engine_select auto: {sel.get('auto_chooses')} ({sel.get('engine_version')})"
                 if sel["ok"] else f"engine_select: FAILED: {sel['error']}")
    ar = doc["arith_worker"]
    lines.append(f"arith {ar.get('split')} through the grader worker: score {ar.get('score')} "
                 f"on {ar.get('n_items')} items, engine {ar.get('engine')}, {ar.get('seconds')} s"
                 if ar["ok"] else f"arith worker: FAILED: {ar.get('error')}")
    lines.append("all checks passed" if doc["ok"] else "SOME CHECKS FAILED")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu_check.json")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, seconds")
    parser.add_argument("--n", type=int, default=0, help="prompts (default 1319, smoke 8)")
    parser.add_argument("--plain-n", type=int, default=0,
                        help="prompts for plain generate (default 128, smoke all)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="default 256, smoke 8")
    parser.add_argument("--batch", type=int, default=0, help="default 128, smoke 4")
    args = parser.parse_args(argv)
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("no CUDA device here: run on a GPU, or use --smoke for the CPU smoke run",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    doc: dict[str, Any] = {"smoke": args.smoke, "environment": {
        "device": torch.cuda.get_device_name() if cuda else "CPU",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory(prefix="a2rl-gpu-check-") as tmp:
        _step(doc, "engines", check_engines, args, cuda, Path(tmp))
        _step(doc, "engine_select", check_engine_select, cuda)
        _step(doc, "arith_worker", check_arith_worker, args, Path(tmp))
    doc["total_s"] = round(time.perf_counter() - started, 1)
    doc["ok"] = all(doc[k]["ok"] for k in ("engines", "engine_select", "arith_worker"))
    (out / "gpu_check.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(summary(doc))
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
