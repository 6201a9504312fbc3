"""Reference SFT: fine-tune the workspace's base model on data/train.jsonl with TRL.

This is the kind of script an agent writes inside its workspace. It only reads workspace paths
(base_model/, data/) and writes a full model + tokenizer to output/<name>/ with
`save_pretrained`, which is what `submit_checkpoint` expects. It imports nothing from a2rl.

Usage (from the workspace root):
    python code/sft.py --base base_model --data data/train.jsonl --out output/sft

With `--time-limit S` it finishes (saved) within S seconds of its start: it measures its steps
per second on the first steps and trains fewer when the planned ones would not fit
(code/timefit.py, which must sit beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def load_rows(path: Path) -> list[dict]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="base_model", help="base model directory")
    parser.add_argument("--data", default="data/train.jsonl", help="training jsonl")
    parser.add_argument("--out", default="output/sft", help="where to save the checkpoint")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    parser.add_argument("--batch", type=int, default=64, help="per-device batch size")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("A2RL_SEED", "0")),
                        help="default: the run's seed, $A2RL_SEED (a2rl replay sets others)")
    parser.add_argument("--max-length", type=int, default=64, help="tokens per example")
    parser.add_argument("--holdout", type=int, default=200,
                        help="train rows held out for a quick accuracy check (0: none)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds from start to the saved checkpoint (default: no limit)")
    args = parser.parse_args()
    began = time.monotonic()
    # after the arguments: --help and a bad flag answer without torch, transformers and TRL
    # (~3 s of imports), which count inside --time-limit
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(args.seed)
    rows = load_rows(Path(args.data))
    held = rows[-args.holdout:] if args.holdout else []
    rows = rows[: len(rows) - len(held)]
    # Prompt/completion in chat form: TRL applies the base model's chat template and computes
    # the loss on the completion (the answer) only.
    dataset = Dataset.from_list([
        {"prompt": [{"role": "user", "content": r["prompt"]}],
         "completion": [{"role": "assistant", "content": r["answer"]}]}
        for r in rows
    ])

    tokenizer = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    config = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="trainer-"),  # nothing is saved there (no saves)
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, args.steps // 20),
        weight_decay=0.0,
        gradient_checkpointing=False,  # twice as slow, and pointless for a tiny model
        bf16=False,
        max_length=args.max_length,
        logging_steps=max(1, args.steps // 10),
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset,
                         processing_class=tokenizer)
    limit = None
    if args.time_limit is not None:
        from timefit import SAVE_SHARE, TimeLimit, cosine, set_threads  # only --time-limit needs it

        print(f"{set_threads()} torch threads for the machine's load")

        # what is left of the limit after loading, less a share kept for saving
        seconds = args.time_limit * (1 - SAVE_SHARE) - (time.monotonic() - began)
        limit = TimeLimit(max(1.0, seconds), schedule=cosine)
        trainer.add_callback(limit)
    start = time.time()
    trainer.train()
    print(f"trained {trainer.state.global_step} steps in {time.time() - start:.1f}s")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"saved to {out}")

    if held and limit is not None and (limit.total is not None or limit.stopped_at_limit):
        print("held-out check skipped: the time limit cut training, the time is the grader's")
    elif held:
        print(f"held-out train accuracy: {accuracy(trainer.model, tokenizer, held):.3f}")


def accuracy(model, tokenizer, rows: list[dict], batch: int = 256) -> float:
    """Greedy exact-match accuracy, with the prompt in the chat template as the grader uses."""
    import torch  # loaded by main (see there)

    model.eval()
    tokenizer.padding_side = "left"
    correct = 0
    for i in range(0, len(rows), batch):
        chunk = rows[i: i + batch]
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}],
                                               add_generation_prompt=True, tokenize=False)
                 for r in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=12, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        for r, ids in zip(chunk, out[:, enc["input_ids"].shape[1]:], strict=True):
            text = tokenizer.decode(ids, skip_special_tokens=True).strip()
            correct += text == r["answer"]
    return correct / max(1, len(rows))


if __name__ == "__main__":
    main()
