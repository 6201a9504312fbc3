"""Which training route produced a submission, read from its code snapshot and the commands
run before it. Every verdict carries the lines it rests on.

The code considered is, in order of preference: the snapshot's files that the commands run
before the submission name (e.g. `python code/sft.py`) or that name the submitted path; when
there are none, every Python file of the snapshot.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable, Mapping

from .schema import Evidence, RouteName

# Most specific first: the first route with evidence wins, the others go to `also`.
PATTERNS: list[tuple[RouteName, re.Pattern[str]]] = [
    ("grpo", re.compile(r"\bGRPO(Trainer|Config)\b")),
    ("ppo", re.compile(r"\bPPO(Trainer|Config)\b|\bPPOv2Trainer\b")),
    ("rloo_reinforce", re.compile(r"\bRLOO(Trainer|Config)\b|\bREINFORCE\b")),
    ("dpo", re.compile(r"\b(DPO|IPO|ORPO|KTO|CPO)(Trainer|Config)\b")),
    ("reward_model", re.compile(r"\bReward(Trainer|Config)\b|AutoModelForSequenceClassification")),
    ("distillation", re.compile(r"\bGKD(Trainer|Config)\b|\bteacher_model\b|"
                                r"\bteacher\s*=|\bdistill\w*\(")),
    ("sft", re.compile(r"\bSFT(Trainer|Config)\b")),
]
# A generic trainer or a hand-written loop: SFT unless a more specific route matched.
GENERIC_TRAINING = re.compile(
    r"\bTrainer\s*\(|\.backward\(\)|\boptimizer\.step\(|\bcross_entropy\b|\bSeq2SeqTrainer\b")
# A hand-written policy-gradient loop turns rewards into advantages; normalized within a group
# of samples of one prompt it is GRPO, otherwise REINFORCE-style.
ADVANTAGE = re.compile(r"\badvantages?\b")
GROUP = re.compile(r"\bgroups?\b")
TRL_ROUTES: dict[str, RouteName] = {
    "sft": "sft", "grpo": "grpo", "dpo": "dpo", "kto": "dpo", "orpo": "dpo", "ppo": "ppo",
    "rloo": "rloo_reinforce", "reward": "reward_model", "gkd": "distillation"}
TRL_CLI = re.compile(r"\btrl\s+(" + "|".join(TRL_ROUTES) + r")\b")
SAVES = re.compile(r"save_pretrained|save_model|torch\.save|copytree")
COPY_CMD = re.compile(r"\b(cp|rsync|ln)\b[^;&|]*\bbase_model\b")
COPY_CODE = re.compile(r"copytree\([^)]*base_model|shutil\.copy\w*\([^)]*base_model")
BASE_REFUSAL = re.compile(r"base model|train before submitting", re.I)


@functools.lru_cache(maxsize=8192)
def _mentions(command: str) -> frozenset[str]:
    # Cached: each submission's classification re-reads every earlier job's command, and
    # shlex is slow (a run of 500 jobs and 50 submissions splits 12,500 commands).
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    return frozenset(w.strip("'\"").removeprefix("./").rstrip("/") for w in words)


def relevant_files(files: Mapping[str, str], commands: Iterable[str]) -> list[str]:
    """The snapshot files the commands name."""
    named: list[str] = []
    mentioned: set[str] = set()
    for command in commands:
        mentioned |= _mentions(command)
    for path in files:
        base = path.rsplit("/", 1)[-1]
        if path in mentioned or base in mentioned or any(m.endswith("/" + path)
                                                          for m in mentioned):
            named.append(path)
    return named


def _scan(path: str, text: str) -> dict[RouteName, list[Evidence]]:
    hits: dict[RouteName, list[Evidence]] = {}
    for no, line in code_lines(text):
        stripped = line.strip()
        for route, pattern in PATTERNS:
            if pattern.search(line):
                hits.setdefault(route, []).append(
                    Evidence(kind="code", file=path, line=no, text=stripped[:200]))
    return hits


def code_lines(text: str) -> list[tuple[int, str]]:
    """(number, line) of the lines that are code: no comments, blanks or docstring prose."""
    out, in_doc = [], False
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        quotes = stripped.count('"""') + stripped.count("'''")
        if in_doc or (quotes == 1 and stripped.startswith(('"""', "'''"))):
            in_doc = not in_doc if quotes % 2 else in_doc
            continue
        if stripped and not stripped.startswith("#") and not (
                quotes == 2 and stripped[:3] in ('"""', "'''")):
            out.append((no, line))
    return out


def _lines(paths: list[str], texts: Mapping[str, str], pattern: re.Pattern[str]
           ) -> list[Evidence]:
    return [Evidence(kind="code", file=p, line=no, text=line.strip()[:200])
            for p in paths for no, line in code_lines(texts[p]) if pattern.search(line)]


def _generic(path: str, text: str) -> list[Evidence]:
    return [Evidence(kind="code", file=path, line=no, text=line.strip()[:200])
            for no, line in code_lines(text) if GENERIC_TRAINING.search(line)]


def classify(target: str, submission_error: str | None, near_copy: bool,
             l2_distance: float | None, files: Mapping[str, str | None],
             commands: list[tuple[str | None, str]], submission_id: str = "",
             ) -> tuple[RouteName, list[RouteName], list[Evidence]]:
    """(route, other routes seen, evidence) for one submission.

    `files`: the snapshot's path -> text (None: binary or missing); `commands`: (job id,
    command) of the jobs started before the submission, oldest first; `target`: the submitted
    path relative to the workspace.
    """
    target = target.strip().removeprefix("./").rstrip("/")
    copy_ev = [Evidence(kind="command", text=c[:300], job_id=j)
               for j, c in commands if COPY_CMD.search(c) and target and target in c]
    if submission_error and BASE_REFUSAL.search(submission_error):
        copy_ev.insert(0, Evidence(kind="submission", text=submission_error,
                                   submission_id=submission_id))
    elif near_copy:
        copy_ev.insert(0, Evidence(kind="submission", submission_id=submission_id,
                                   text=f"accepted but flagged near_copy (relative L2 distance "
                                        f"{l2_distance:.2e} from the base)"
                                   if l2_distance is not None else "flagged near_copy"))
    if copy_ev and (submission_error or near_copy or not _writers(target, commands)):
        return "copy_of_base", [], copy_ev

    texts = {p: t for p, t in files.items() if t is not None}
    cmd_texts = [c for _, c in commands]
    # The commands that name the submitted path say best which code wrote it.
    chosen = relevant_files(texts, [c for c in cmd_texts if target and target in c]
                            or cmd_texts)
    chosen += [p for p, t in texts.items() if target and target in t and p not in chosen]
    if not chosen:
        chosen = [p for p in texts if p.endswith(".py")]
    cmd_ev = [Evidence(kind="command", text=c[:300], job_id=j) for j, c in commands
              if any(p in c or p.rsplit("/", 1)[-1] in c for p in chosen)]

    hits: dict[RouteName, list[Evidence]] = {}
    for path in chosen:
        for route, ev in _scan(path, texts[path]).items():
            hits.setdefault(route, []).extend(ev)
    # Commands can carry the route too (`trl sft ...`, `trl dpo ...`).
    for j, c in commands:
        for m in TRL_CLI.finditer(c):
            hits.setdefault(TRL_ROUTES[m.group(1)], []).append(
                Evidence(kind="command", text=c[:300], job_id=j))
    order = [r for r, _ in PATTERNS if r in hits]
    if order:
        return order[0], order[1:], hits[order[0]][:8] + cmd_ev[:3]
    generic = [e for p in chosen for e in _generic(p, texts[p])]
    if generic:
        policy = _lines(chosen, texts, ADVANTAGE)
        if policy:
            route: RouteName = ("grpo" if any(GROUP.search(e.text) for e in policy)
                                else "rloo_reinforce")
            return route, [], policy[:6] + generic[:2] + cmd_ev[:3]
        return "sft", [], generic[:8] + cmd_ev[:3]
    if copy_ev:
        return "copy_of_base", [], copy_ev
    saves = [Evidence(kind="code", file=p, line=no, text=line.strip()[:200])
             for p in chosen for no, line in enumerate(texts[p].splitlines(), 1)
             if SAVES.search(line)]
    if saves:
        return "no_training", [], saves[:5] + cmd_ev[:3]
    return "unknown", [], cmd_ev[:5]


def _writers(target: str, commands: list[tuple[str | None, str]]) -> bool:
    """Whether anything other than a copy wrote the target after the copy."""
    return any(target in c and not COPY_CMD.search(c) for _, c in commands)
