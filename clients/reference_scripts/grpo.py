"""Reference GRPO: reinforce exact answers, starting from an SFT checkpoint, with TRL.

The reward is 1 when the completion (stripped) is exactly the expected number, else 0. Prompts
are the train problems in the base model's chat template, as the grader renders them. Only
workspace paths are read (output/<sft>/, data/); the result is a full model + tokenizer saved
with `save_pretrained` under output/<name>/. Imports nothing from a2rl.

Usage (from the workspace root):
    python code/grpo.py --init output/sft --data data/train.jsonl --out output/grpo

`--time-limit S`: saved within S seconds of its start, with fewer steps when the measured rate
says the planned ones would not fit (code/timefit.py, beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def completion_text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return completion[-1]["content"] if completion else ""
    return completion


def exact_match(completions, answer, **_kwargs) -> list[float]:
    """1.0 for an exact answer, 0.0 otherwise (the grader's rule)."""
    return [float(completion_text(c).strip() == a) for c, a in zip(completions, answer,
                                                                   strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init", default="output/sft", help="checkpoint to start from")
    parser.add_argument("--data", default="data/train.jsonl", help="training jsonl")
    parser.add_argument("--out", default="output/grpo", help="where to save the checkpoint")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=1e-4, help="learning rate")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="samples per prompt")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("A2RL_SEED", "0")),
                        help="default: the run's seed, $A2RL_SEED (a2rl replay sets others)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds from start to the saved checkpoint (default: no limit)")
    args = parser.parse_args()
    began = time.monotonic()
    # after the arguments: --help and a bad flag answer without torch, transformers and TRL
    # (~3 s of imports), which count inside --time-limit
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(args.seed)
    with Path(args.data).open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    dataset = Dataset.from_list([
        {"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]}
        for r in rows
    ])
    tokenizer = AutoTokenizer.from_pretrained(args.init)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32)
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trainer-"),  # nothing is saved there (no saves)
        max_steps=args.steps,
        learning_rate=args.lr,
        per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations,
        max_completion_length=8,
        temperature=1.0,
        beta=0.0,
        gradient_checkpointing=False,  # twice as slow, and pointless for a tiny model
        bf16=False,
        logging_steps=max(1, args.steps // 10),
        save_strategy="no",
        report_to=[],
        seed=args.seed,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=exact_match, args=config,
                          train_dataset=dataset, processing_class=tokenizer)
    if args.time_limit is not None:
        from timefit import SAVE_SHARE, TimeLimit, set_threads  # only --time-limit needs it

        print(f"{set_threads()} torch threads for the machine's load")

        # a refinement: fewer steps stop it earlier, its (linear) schedule is left as it is
        seconds = args.time_limit * (1 - SAVE_SHARE) - (time.monotonic() - began)
        trainer.add_callback(TimeLimit(max(1.0, seconds)))
    start = time.time()
    trainer.train()
    print(f"trained {trainer.state.global_step} GRPO steps in {time.time() - start:.1f}s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"saved to {out}")


if __name__ == "__main__":
    main()
