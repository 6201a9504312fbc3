"""Level-3 toy benchmark: SFT alone vs SFT + online GRPO on `textquest`, over several seeds.

Why: the toy task is built so that imitation of the demonstrations is not enough (they show
half of the lamp colours); this measures that online RL through the workspace's environment API
closes the gap. Each seed prepares a fresh workspace, runs the reference scripts there as
subprocesses (exactly as the reference agent does inside its sandbox, minus MCP), and grades
both checkpoints with the grader's `evaluate` (rollouts on a hidden split). The target: the mean
success of SFT+GRPO beats SFT alone by at least 10 points and by more than the spread (max - min)
across seeds of either route.

    .venv/bin/python bench/level3_toy.py [--seeds 3] [--split test] [--json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from a2rl.grading.evaluate import evaluate
from a2rl.settings import Settings
from a2rl.tasks import get_task, prepare_workspace

SFT_ARGS = "--steps 100 --batch 32 --max-length 128 --holdout 0"  # as the reference agent
GRPO_ARGS = ""


def script_text(name: str) -> str:
    return resources.files("a2rl.clients").joinpath("reference_scripts", name).read_text()


def run_script(ws: Path, argv: str, log: Path) -> float:
    """Run one reference script in the workspace; its output goes to `log`. Seconds taken."""
    start = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.run([sys.executable, *shlex.split(argv)], cwd=ws, stdout=f,
                              stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed (exit {proc.returncode}); see {log}")
    return time.monotonic() - start


def one_seed(seed: int, root: Path, settings: Settings, split: str, sft_args: str,
             grpo_args: str) -> dict[str, Any]:
    task = get_task("textquest")
    ws = root / f"seed{seed}"
    prepare_workspace(task, ws, settings)
    for name in ("sft.py", "grpo_env.py"):
        (ws / "code" / name).write_text(script_text(name))
    sft_s = run_script(ws, f"code/sft.py --out output/sft --seed {seed} {sft_args}",
                       ws / "logs" / "sft.log")
    sft = evaluate(task, ws / "output" / "sft", split, settings)  # type: ignore[arg-type]
    grpo_s = run_script(ws, f"code/grpo_env.py --init output/sft --out output/grpo "
                            f"--seed {seed} {grpo_args}", ws / "logs" / "grpo.log")
    grpo = evaluate(task, ws / "output" / "grpo", split, settings)  # type: ignore[arg-type]
    rewards = [json.loads(line)["mean_reward"]
               for line in (ws / "logs" / "grpo_env.jsonl").read_text().splitlines()]
    return {"seed": seed, "sft": sft.score, "grpo": grpo.score,
            "sft_by_group": sft.metrics.get("success_by_group"),
            "grpo_by_group": grpo.metrics.get("success_by_group"),
            "sft_s": round(sft_s, 1), "grpo_s": round(grpo_s, 1),
            "reward_first": rewards[0], "reward_last": rewards[-1]}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sft = [r["sft"] for r in rows]
    grpo = [r["grpo"] for r in rows]
    diff = statistics.fmean(grpo) - statistics.fmean(sft)
    spread = max(max(sft) - min(sft), max(grpo) - min(grpo))
    return {"sft_mean": statistics.fmean(sft), "grpo_mean": statistics.fmean(grpo),
            "difference": diff, "sft_spread": max(sft) - min(sft),
            "grpo_spread": max(grpo) - min(grpo), "spread": spread,
            "target_met": diff >= 0.10 and diff > spread}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--split", choices=["dev", "test"], default="test")
    parser.add_argument("--sft-args", default=SFT_ARGS)
    parser.add_argument("--grpo-args", default=GRPO_ARGS)
    parser.add_argument("--keep", action="store_true", help="keep the workspaces")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="a2rl-level3-"))
    settings = Settings(home=root / "home")  # one home: the same hidden split for every seed
    rows = []
    for seed in range(args.seeds):
        row = one_seed(seed, root, settings, args.split, args.sft_args, args.grpo_args)
        rows.append(row)
        if not args.json:
            print(f"seed {seed}: SFT {row['sft']:.3f}  SFT+GRPO {row['grpo']:.3f}  "
                  f"(by group {row['sft_by_group']} -> {row['grpo_by_group']}; "
                  f"GRPO reward {row['reward_first']:.2f} -> {row['reward_last']:.2f}; "
                  f"{row['sft_s']:.0f}s + {row['grpo_s']:.0f}s)", flush=True)
    summary = summarize(rows)
    if args.json:
        print(json.dumps({"rows": rows, **summary}))
    else:
        print(f"mean success on {args.split}: SFT {summary['sft_mean']:.3f}, SFT+GRPO "
              f"{summary['grpo_mean']:.3f}, difference {summary['difference']:+.3f}; spread "
              f"across seeds SFT {summary['sft_spread']:.3f}, SFT+GRPO "
              f"{summary['grpo_spread']:.3f}; target met: {summary['target_met']}")
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
