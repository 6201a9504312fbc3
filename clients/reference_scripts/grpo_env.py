"""Reference online GRPO: play the task's environment (env/, training games) and reinforce
the actions of episodes that did better than their group.

Each iteration draws `--instances` training games and plays each `--group` times with sampled
actions (the prompts are the grader's, from `a2rl_env`). An episode's advantage is its reward
minus its group's mean, over the group's standard deviation; every action of the episode gets
that advantage (REINFORCE with a group baseline, one update per iteration, no KL).
Plain torch, no trainer: one forward and backward over all sampled steps per iteration.

Why the exploration: after SFT the model is nearly deterministic, also in situations the
demonstrations never showed, so a group of samples all fail alike and carry no signal. With
probability `--explore` an action is replaced by a random one from the action vocabulary (the
admissible actions when the environment gives them, else the actions of the demonstrations);
reinforcing such an action when it won is what teaches the unseen situations.
Imports nothing from a2rl; reads output/<init>/ and env/, writes output/<name>/.

Usage (from the workspace root):
    python code/grpo_env.py --init output/sft --out output/grpo
Logs one JSON line per iteration (`mean_reward`, ...) on stdout and to --log.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path


def sample_actions(model, tokenizer, prompts: list[str], max_new_tokens: int,
                   temperature: float) -> tuple[list[str], list[list[int]], list[list[int]]]:
    """Sampled completions: texts, prompt token ids and completion ids (through EOS)."""
    import torch  # loaded by main (see there)

    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                           add_generation_prompt=True, tokenize=False)
             for p in prompts]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    new = out[:, enc["input_ids"].shape[1]:].tolist()
    outputs, prompt_ids, completion_ids = [], [], []
    for row, mask, ids in zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist(), new,
                              strict=True):
        if tokenizer.eos_token_id in ids:
            ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
        outputs.append(tokenizer.decode(ids, skip_special_tokens=True))
        prompt_ids.append([t for t, m in zip(row, mask, strict=True) if m])
        completion_ids.append(ids)
    return outputs, prompt_ids, completion_ids


def explore(outputs: list[str], completion_ids: list[list[int]], steps: list, tokenizer,
            vocabulary: list[str], rate: float, rng: random.Random) -> None:
    """Replace each action by a random one of the vocabulary (or the step's admissible
    actions) with probability `rate`, in place, with its token ids (ending in EOS)."""
    for j, step in enumerate(steps):
        choices = (step.admissible if step is not None and step.admissible else vocabulary)
        if choices and rng.random() < rate:
            action = rng.choice(choices)
            outputs[j] = action
            completion_ids[j] = (tokenizer(action, add_special_tokens=False)["input_ids"]
                                 + [tokenizer.eos_token_id])


def demo_actions(path: Path) -> list[str]:
    """The distinct actions of the demonstrations (their `answer` field)."""
    if not path.is_file():
        return []
    with path.open() as f:
        return sorted({json.loads(line)["answer"] for line in f if line.strip()})


def policy_loss(model, pad_id: int, samples: list[tuple[list[int], list[int], float]]):
    """-(1/n) sum_s A_s * log p(completion_s | prompt_s), one right-padded batch."""
    import torch  # loaded by main (see there)

    width = max(len(p) + len(c) for p, c, _ in samples)
    ids = torch.full((len(samples), width), pad_id)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    target = torch.zeros((len(samples), width), dtype=torch.bool)
    adv = torch.tensor([a for _, _, a in samples], dtype=torch.float32)
    for i, (p, c, _) in enumerate(samples):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attn[i, : len(p) + len(c)] = 1
        target[i, len(p): len(p) + len(c)] = True
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    per_sample = (logp * target[:, 1:]).sum(dim=1)
    return -(adv * per_sample).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init", default="output/sft", help="checkpoint to start from")
    parser.add_argument("--out", default="output/grpo", help="where to save the checkpoint")
    parser.add_argument("--env", default="env", help="the environment API folder")
    parser.add_argument("--iters", type=int, default=50, help="policy updates")
    parser.add_argument("--instances", type=int, default=8, help="training games per update")
    parser.add_argument("--group", type=int, default=8, help="episodes per game (the group)")
    parser.add_argument("--lr", type=float, default=3e-4, help="Adam learning rate")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument("--explore", type=float, default=0.25,
                        help="probability of a random action from the vocabulary per step")
    parser.add_argument("--data", default="data/train.jsonl",
                        help="demonstrations (their actions are the exploration vocabulary)")
    parser.add_argument("--max-new-tokens", type=int, default=0,
                        help="tokens sampled per action (0: the grader's, from env/manifest.json;"
                             " fewer for smoke runs, whose grader is capped alike)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("A2RL_SEED", "0")),
                        help="default: the run's seed, $A2RL_SEED (a2rl replay sets others)")
    parser.add_argument("--log", default="logs/grpo_env.jsonl", help="per-iteration JSON lines")
    args = parser.parse_args()

    # after the arguments: --help and a bad flag answer without torch and transformers (~2 s)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, args.env)
    import a2rl_env  # the workspace's environment API (env/a2rl_env.py)

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    manifest = a2rl_env.manifest()
    max_new_tokens = args.max_new_tokens or manifest["max_new_tokens"]
    ids = a2rl_env.train_ids()
    vocabulary = demo_actions(Path(args.data))
    tokenizer = AutoTokenizer.from_pretrained(args.init)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with log.open("w") as log_file:
        for it in range(args.iters):
            games = rng.sample(ids, args.instances)
            pool = a2rl_env.make_pool([g for g in games for _ in range(args.group)])
            pool.reset()
            steps: list[tuple[int, list[int], list[int]]] = []  # (episode, prompt, completion)
            model.eval()
            while active := pool.active():
                outputs, p_ids, c_ids = sample_actions(
                    model, tokenizer, pool.prompts(active), max_new_tokens, args.temperature)
                explore(outputs, c_ids, [pool.last[i] for i in active], tokenizer, vocabulary,
                        args.explore, rng)
                steps += list(zip(active, p_ids, c_ids, strict=True))
                pool.step(dict(zip(active, outputs, strict=True)))
            rewards = [ep.total_reward for ep in pool.episodes]
            advantages = []
            for g in range(args.instances):
                group = rewards[g * args.group: (g + 1) * args.group]
                mean, std = statistics.fmean(group), statistics.pstdev(group)
                advantages += [(r - mean) / (std + 1e-4) if std > 0 else 0.0 for r in group]
            samples = [(p, c, advantages[e]) for e, p, c in steps if advantages[e] != 0.0]
            if samples:
                model.train()
                loss = policy_loss(model, tokenizer.pad_token_id, samples)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            record = {"iter": it, "mean_reward": round(statistics.fmean(rewards), 4),
                      "success": round(statistics.fmean(ep.success for ep in pool.episodes), 4),
                      "updated_steps": len(samples), "seconds": round(time.time() - start, 1)}
            print(json.dumps(record), flush=True)
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"trained {args.iters} iterations in {time.time() - start:.1f}s; saved to {out}")


if __name__ == "__main__":
    main()
