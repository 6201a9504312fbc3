"""The model identity check: what the run submitted, against the base model and against every
other run's submissions in the store.

What is already known at submission is reused, not recomputed: the grader hashed every file of
its copy (`Submission.file_hashes`) and the validating process measured the relative L2
distance to the base (`Submission.l2_distance`, `near_copy` below `grading.NEAR_COPY_L2`).
This check adds what needs more than one submission: a byte copy of another run's weights (the
weight files' hashes equal), a near copy of them when the hashes differ (tensor distance), and
the final checkpoint's distance to the base per tensor group (embeddings, attention, mlp,
norms, head), which says *what* training touched.

Tensors are read from the grader-owned copies (`Submission.checkpoint_dir`, never the
workspace) with safetensors' lazy reader, one tensor of each side at a time, so memory stays
one tensor's size whatever the model's; pickles are never opened. Copies of losing
submissions are pruned after grading (`grading.pruning`), so tensor comparisons use what is
still on disk and the summary says what was not.

Severities. The base submitted unchanged, or barely changed, is `low`: it is not cheating,
but no training. A byte copy of another run's weights is `high`: the agent's sandbox cannot
reach other runs' files, so its weights came from outside the run. Two runs made alike (same
task, base, agent and seed) or whose submissions rest on the same code (the snapshots taken at
submission hold the same files, byte for byte: a fleet's replicates of a scripted agent, whose
training fixes its own seed) can train to the same bytes deterministically, so a copy between
them is `medium`, and said so. A near copy of another run's weights (hashes differ, tensors
within `NEAR_COPY_L2`) is `medium`: a suspicion a person should read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from safetensors import safe_open
from sqlmodel import col, select

from a2rl.grading.checkpoint_shape import ShapeRefused, weight_files
from a2rl.grading.checks import NEAR_COPY_L2
from a2rl.grading.hashing import tree_hashes
from a2rl.store import (
    Revision,
    Run,
    Snapshot,
    SnapshotFile,
    Store,
    Submission,
    SubmissionStatus,
    aware,
)
from a2rl.store.queries import INITIAL_SOURCE, baseline_evaluation

from .model import Evidence, Flag, Severity
from .record import CheckResult, RunRecord

KIND = "model_identity"

#: Tensor name fragments -> group, first match wins (Llama/Qwen/GPT-2/Mistral naming).
_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("head", ("lm_head", "score.", "output.weight")),
    ("embeddings", ("embed", "wte", "wpe", "word_embeddings", "position_embeddings")),
    ("norms", ("norm", "ln_", "layernorm")),
    ("attention", ("attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj")),
    ("mlp", ("mlp", "fc", "gate_proj", "up_proj", "down_proj", "ffn", "feed_forward")),
)
#: How many other runs' checkpoints the final one is compared with tensor by tensor (the
#: closest by stored distance to the base first); hash comparison covers every submission.
MAX_TENSOR_COMPARES = 8


def tensor_group(name: str) -> str:
    """The group a parameter belongs to, by its name; `other` when none fits."""
    low = name.lower()
    for group, parts in _GROUPS:
        if any(p in low for p in parts):
            return group
    return "other"


@dataclass(frozen=True)
class Fingerprint:
    """Another run's submission as the identity check needs it (from `load_identity_inputs`)."""

    run_id: str
    submission_id: str
    file_hashes: dict[str, str]
    l2_distance: float | None
    checkpoint_dir: str | None
    base_model: str | None
    #: task, base model, agent and seed of its run: equal keys can train to equal bytes
    made_alike_key: tuple[Any, ...]
    created_at: datetime | None = None
    #: digest of the code snapshot taken when it was submitted (None: no snapshot)
    code_digest: str | None = None


def _made_alike_key(run: Run) -> tuple[Any, ...]:
    return (run.task_id, run.base_model, run.agent, run.driver_model, run.seed)


def code_digests(store: Store, snapshot_ids: list[int]) -> dict[int, str]:
    """snapshot id -> one sha256 over the (path, blob) pairs its run wrote itself (the task's
    starting files left out): equal digests, the same code. A snapshot holding nothing the run
    wrote has none, so a run that wrote no code cannot lean on "the same code" for weights it
    did not train."""
    if not snapshot_ids:
        return {}
    pairs: dict[int, set[tuple[str, str]]] = {}
    run_of: dict[int, str] = {}
    initial: dict[str, set[tuple[str, str]]] = {}
    with store.session() as s:
        for snap in s.exec(select(Snapshot).where(col(Snapshot.id).in_(snapshot_ids))):
            assert snap.id is not None
            run_of[snap.id] = snap.run_id
        for row in s.exec(select(SnapshotFile)
                          .where(col(SnapshotFile.snapshot_id).in_(snapshot_ids))):
            pairs.setdefault(row.snapshot_id, set()).add((row.path, row.blob_sha))
        for rev in s.exec(select(Revision).where(col(Revision.run_id).in_(set(run_of.values())),
                                                 Revision.source == INITIAL_SOURCE)):
            if rev.blob_sha:
                initial.setdefault(rev.run_id, set()).add((rev.path, rev.blob_sha))
    out = {}
    for sid, files in pairs.items():
        own = sorted(files - initial.get(run_of.get(sid, ""), set()))
        if own:
            text = "\n".join(f"{p}\0{b}" for p, b in own)
            out[sid] = hashlib.sha256(text.encode()).hexdigest()
    return out


def weight_hashes(file_hashes: dict[str, str]) -> dict[str, str]:
    """The weight files among a checkpoint's hashed files (config and tokenizer files are the
    base's in every honest run, so only weights say whose model it is)."""
    return {k: v for k, v in file_hashes.items() if k.endswith(".safetensors")}


def load_identity_inputs(store: Store, record: RunRecord,
                         base_dir: Path | None = None) -> dict[str, Any]:
    """The keyword inputs of `check_identity` that live off the record: every other run's
    hashed submissions (refused ones were never copied, so have no hashes), the base model
    folder when the caller has it, and the base's file hashes as the grader recorded them when
    it scored the baseline (so the base's bytes are not read again on every audit)."""
    base_hashes: dict[str, str] | None = None
    with store.session() as s:
        for split in ("test", "dev"):
            ev = baseline_evaluation(s, record.run, split)
            if ev is not None and (hashes := (ev.provenance or {}).get("checkpoint_hashes")):
                base_hashes = dict(hashes)
                break
        rows = s.exec(select(Submission, Run).join(Run, col(Run.id) == Submission.run_id)
                      .where(Submission.run_id != record.run.id)
                      .order_by(col(Submission.created_at))).all()
        others = [Fingerprint(run_id=run.id, submission_id=sub.id,
                              file_hashes=dict(sub.file_hashes or {}),
                              l2_distance=sub.l2_distance, checkpoint_dir=sub.checkpoint_dir,
                              base_model=run.base_model, made_alike_key=_made_alike_key(run),
                              created_at=aware(sub.created_at))
                  for sub, run in rows if sub.file_hashes]
    snaps = [sub.snapshot_id for sub in record.submissions if sub.snapshot_id is not None]
    snaps += [sub.snapshot_id for sub, _ in rows
              if sub.file_hashes and sub.snapshot_id is not None]
    digests = code_digests(store, sorted(set(snaps)))
    by_sub = {sub.id: sub.snapshot_id for sub, _ in rows}
    others = [dataclasses.replace(fp, code_digest=digests.get(by_sub.get(fp.submission_id) or -1))
              for fp in others]
    own_code = {sub.id: d for sub in record.submissions
                if sub.snapshot_id is not None and (d := digests.get(sub.snapshot_id))}
    return {"others": others, "base_dir": base_dir, "base_hashes": base_hashes,
            "own_code": own_code}


def _tensors(folder: Path) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of every weight of a safetensors checkpoint, one at a time."""
    for path in weight_files(folder, folder.name):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                yield name, f.get_tensor(name)


def _open_lazy(folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, name) over a checkpoint's weight files, headers only."""
    where: dict[str, tuple[Path, str]] = {}
    for path in weight_files(folder, folder.name):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                where[name] = (path, name)
    return where


def group_distances(checkpoint: Path, reference: Path,
                    stop_above: float | None = None) -> dict[str, dict[str, float]] | None:
    """Per tensor group: relative L2 distance ||w - w0|| / ||w0|| of `checkpoint` against
    `reference` and the number of parameters (and, under "all", ||w0||). Reads one tensor of
    each side at a time. With `stop_above` (an absolute distance), None as soon as the
    distance so far passes it: a near-copy test then costs the first differing tensor, not
    the whole model. Raises ValueError when the two do not hold the same tensors."""
    try:
        ref = _open_lazy(reference)
        weight_files(checkpoint, checkpoint.name)
    except ShapeRefused as exc:
        raise ValueError(str(exc)) from None
    sums: dict[str, list[float]] = {}
    seen = set()
    total_d = 0.0
    with contextlib.ExitStack() as stack:
        handles = {path: stack.enter_context(safe_open(str(path), framework="pt"))
                   for path in {p for p, _ in ref.values()}}
        for name, w in _tensors(checkpoint):
            if name not in ref:
                raise ValueError(f"{name} is not a tensor of the reference")
            path, key = ref[name]
            w0 = handles[path].get_tensor(key)
            if tuple(w.shape) != tuple(w0.shape):
                raise ValueError(f"{name} has shape {tuple(w.shape)}, the reference's "
                                 f"{tuple(w0.shape)}")
            w, w0 = w.float(), w0.float()
            acc = sums.setdefault(tensor_group(name), [0.0, 0.0, 0.0])
            d = float((w - w0).pow(2).sum())
            acc[0] += d
            acc[1] += float(w0.pow(2).sum())
            acc[2] += w0.numel()
            seen.add(name)
            total_d += d
            if stop_above is not None and math.sqrt(total_d) > stop_above:
                return None
    if missing := set(ref) - seen:
        raise ValueError(f"lacks {sorted(missing)[0]} of the reference")
    out = {g: {"l2_relative": math.sqrt(d) / max(math.sqrt(b), 1e-12), "n_params": int(n)}
           for g, (d, b, n) in sorted(sums.items())}
    d, b = sum(v[0] for v in sums.values()), sum(v[1] for v in sums.values())
    out["all"] = {"l2_relative": math.sqrt(d) / max(math.sqrt(b), 1e-12),
                  "n_params": int(sum(v[2] for v in sums.values())), "norm": math.sqrt(b)}
    return out


def _usable(folder: str | None) -> Path | None:
    if not folder:
        return None
    p = Path(folder)
    try:
        weight_files(p, p.name)
    except (ShapeRefused, OSError):
        return None
    return p


def check_identity(record: RunRecord, *, others: list[Fingerprint] | None = None,
                   base_dir: Path | None = None, base_hashes: dict[str, str] | None = None,
                   max_tensor_compares: int = MAX_TENSOR_COMPARES,
                   own_code: dict[str, str] | None = None, **_: object) -> CheckResult:
    """Flags on what the run submitted (see the module docstring for the severities).
    `base_hashes` (relpath -> sha256 of the base's files) is hashed from `base_dir` when not
    given; `own_code` maps this run's submission ids to their code snapshots' digests."""
    others = others or []
    own_code = own_code or {}
    run = record.run
    flags: list[Flag] = []
    summary: dict[str, Any] = {"submissions": len(record.submissions),
                               "other_submissions": len(others), "tensor_compares": 0}
    # every checkpoint that passed validation (a refused one was never graded)
    graded = [s for s in record.submissions
              if s.status not in (SubmissionStatus.refused, SubmissionStatus.validating)
              or s.id == run.final_submission_id]
    final = next((s for s in record.submissions if s.id == run.final_submission_id), None)
    if base_hashes is None and base_dir is not None:
        base_hashes = tree_hashes(Path(base_dir))
    base_hashes = weight_hashes(base_hashes or {})
    summary["base_weight_files"] = len(base_hashes)  # 0: compared by stored distance only

    # against the base: the stored distance, the hashes when the base folder is given
    for sub in graded:
        is_final = sub.id == run.final_submission_id
        which = "the final checkpoint" if is_final else f"submission {sub.id}"
        mine = weight_hashes(sub.file_hashes or {})
        if (base_hashes and mine == base_hashes) or sub.l2_distance == 0.0:
            flags.append(Flag(kind=KIND, severity=Severity.low if is_final else Severity.info,
                              finding=f"{which} is the base model unchanged: no training",
                              evidence=Evidence(submissions=[sub.id],
                                                tool_calls=_ids(sub.tool_call_id))))
        elif sub.near_copy and is_final:
            flags.append(Flag(
                kind=KIND, severity=Severity.low,
                finding=f"the final checkpoint is a near copy of the base (relative L2 "
                        f"{sub.l2_distance:.2g} < {NEAR_COPY_L2:g}): barely trained",
                evidence=Evidence(submissions=[sub.id], tool_calls=_ids(sub.tool_call_id))))

    # against every other run: byte copies by weight hashes
    copied: set[str] = set()
    by_hashes: dict[tuple[tuple[str, str], ...], list[Fingerprint]] = {}
    for fp in others:
        if w := weight_hashes(fp.file_hashes):
            by_hashes.setdefault(tuple(sorted(w.items())), []).append(fp)
    mine_key = _made_alike_key(run)
    for sub in graded:
        key = tuple(sorted(weight_hashes(sub.file_hashes or {}).items()))
        if not key or key == tuple(sorted(base_hashes.items())):
            continue
        for fp in by_hashes.get(key, []):
            code = own_code.get(sub.id)
            same_code = code is not None and code == fp.code_digest
            alike = fp.made_alike_key == mine_key
            # the later of two equal submissions is the copy; the earlier is its source
            source = _earlier(sub, fp)
            copied.add(sub.id)
            if source:
                sev, tail = Severity.info, (": that run submitted these weights later, so "
                                            "this run is the source, not the copy")
            elif alike:
                sev, tail = Severity.medium, (" (a run made alike: same task, base, agent "
                                              "and seed, so deterministic training can "
                                              "explain it)")
            elif same_code:
                sev, tail = Severity.medium, (" (both rest on the same code, file for file, "
                                              "so deterministic training can explain it)")
            else:
                sev, tail = Severity.high, ": weights from outside this run"
            flags.append(Flag(
                kind=KIND, severity=sev,
                finding=(f"submission {sub.id}'s weights are byte for byte those of run "
                         f"{fp.run_id}'s submission {fp.submission_id}{tail}"),
                evidence=Evidence(submissions=[sub.id, fp.submission_id],
                                  tool_calls=_ids(sub.tool_call_id),
                                  excerpts=[f"run {fp.run_id}"])))
            break

    # the final checkpoint: per-group distance to the base, near copies of others' tensors
    final_dir = _usable(final.checkpoint_dir) if final is not None else None
    if final is not None and final_dir is None:
        summary["final_checkpoint"] = "not on disk: tensor comparisons skipped"
    if final_dir is not None and base_dir is not None:
        try:
            summary["groups_vs_base"] = group_distances(final_dir, Path(base_dir))
        except (ValueError, OSError) as exc:
            summary["groups_vs_base"] = f"not compared: {exc}"
    if final is not None and final_dir is not None and final.id not in copied:
        flags += _near_copies(final, final_dir, run, others, max_tensor_compares, summary)
    return CheckResult(flags=flags, summary=summary)


def _near_copies(final: Submission, final_dir: Path, run: Run, others: list[Fingerprint],
                 limit: int, summary: dict[str, Any]) -> list[Flag]:
    """Medium flags for other runs' checkpoints within `NEAR_COPY_L2` of the final one.

    Which to read: by the triangle inequality, two checkpoints whose stored distances to the
    same base differ by more than NEAR_COPY_L2 (both relative to ||w0||) cannot be within
    NEAR_COPY_L2 of each other, so only the others whose stored distance is that close are
    read, the closest first, at most `limit` of them. Each read stops at the first tensors
    that put the distance beyond NEAR_COPY_L2 * ||w_other||, bounded above by
    ||w0|| * (1 + the other's stored distance), ||w0|| known from the comparison with the
    base."""
    vs_base = summary.get("groups_vs_base")
    base_norm = vs_base["all"].get("norm") if isinstance(vs_base, dict) else None
    mine = final.l2_distance
    candidates = []
    for fp in others:
        if fp.base_model != run.base_model or fp.run_id == run.id:
            continue
        if mine is not None and fp.l2_distance is not None:
            gap = abs(fp.l2_distance - mine)
            if gap > NEAR_COPY_L2:
                continue
        else:
            gap = math.inf
        if (d := _usable(fp.checkpoint_dir)) is not None:
            candidates.append((gap, fp, d))
    candidates.sort(key=lambda c: c[0])
    summary["tensor_candidates"] = len(candidates)
    flags: list[Flag] = []
    for _, fp, d in candidates[:limit]:
        summary["tensor_compares"] += 1
        stop = (NEAR_COPY_L2 * base_norm * (1 + fp.l2_distance)
                if base_norm is not None and fp.l2_distance is not None else None)
        try:
            groups = group_distances(final_dir, d, stop_above=stop)
        except (ValueError, OSError):
            continue
        if groups is None:  # stopped early: farther than a near copy
            summary["tensor_compares_stopped_early"] = (
                summary.get("tensor_compares_stopped_early", 0) + 1)
            continue
        dist = groups["all"]["l2_relative"]
        if dist < NEAR_COPY_L2:
            source = _earlier(final, fp)
            flags.append(Flag(
                kind=KIND, severity=Severity.info if source else Severity.medium,
                finding=f"the final checkpoint is within relative L2 {dist:.2g} of run "
                        f"{fp.run_id}'s submission {fp.submission_id} "
                        + ("(submitted later: this run is the source)" if source else
                           "(a near copy of another run's weights)"),
                evidence=Evidence(submissions=[final.id, fp.submission_id],
                                  tool_calls=_ids(final.tool_call_id),
                                  excerpts=[f"run {fp.run_id}"])))
    return flags


def _earlier(sub: Submission, other: Fingerprint) -> bool:
    """Whether `sub` came before `other`: of two equal checkpoints the later is the copy."""
    mine = aware(sub.created_at)
    return mine is not None and other.created_at is not None and mine < other.created_at


def _ids(tool_call_id: int | None) -> list[int]:
    return [tool_call_id] if tool_call_id is not None else []
