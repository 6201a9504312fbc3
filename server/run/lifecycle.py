"""Run lifecycle: create a run (workspace, token, row) and finish it (stop, settle, close).

The clock parts (starting it with the run, closing it) are `RunClock`'s; finishing grades the
run's own queued requests and scores its final submission (`finalize`).

Layout of a run on disk, all under `$A2RL_HOME/runs/<run id>/`: `workspace/` (what the agent
sees, laid out by `a2rl.tasks.prepare_workspace` with the names of `a2rl.layout`), `control/` (the
sandbox supervisor's socket and token, never visible inside), `services/` (unix sockets a
sandbox may use) and `run.log` (this run's server events).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl.sandbox import volume
from a2rl.sandbox.base import SandboxChoices
from a2rl.sandbox.cgroup import RunCgroup
from a2rl.sandbox.registry import local_unsafe, run_options
from a2rl.settings import Settings, parse_duration
from a2rl.store import EndKind, Run, RunConfig, RunSetup, RunStatus, Store
from a2rl.store.owners import process_owner
from a2rl.store.records import runs
from a2rl.tools.access_record import folder_of as access_folder
from a2rl.tools.access_record import ingest as ingest_access
from a2rl.tools.jobs import stop_all, stop_cause
from a2rl.tools.revisions import RevisionScanner
from a2rl.tools.runtime import run_logger

from ..auth import new_token
from .finalize import finalize_scores
from .hooks import build_runtime

#: A run folder's file naming the process making it (`host:pid:start`), from its first
#: moment until its row is written: `a2rl gc` never removes the folder of a live maker.
MAKER_FILE = "maker"


@dataclass
class CreatedRun:
    run: Run
    token: str  # shown once; only its hash is stored


def new_run_id() -> str:
    return "r-" + secrets.token_hex(5)


def create_run(settings: Settings, store: Store, config: RunConfig | None = None, *,
               start_clock: bool = False, baseline: bool = True, **fields: Any) -> CreatedRun:
    """Make a run of `config`: its folder, a workspace with the task's visible files, a token
    and a row. `fields` instead of a config: `create_run(s, st, task_id="gsm8k")` is
    `create_run(s, st, RunConfig(task_id="gsm8k"))`; a bad one is a one-line
    `RunConfigError`.

    The budget clock starts now with `start_clock` (a2rl run), else at the first tool call;
    `baseline` False skips scoring the base model (tests). The config's profile is the
    evaluation profile (`a2rl.tasks.profiles`): the task is built for it, so the workspace,
    the default budget and base model and every evaluation follow it. Its fleet membership is
    written with the row itself, so a run whose node dies right after it is made still
    belongs to its fleet. Its task options (-T key=value) go over the settings'
    (`a2rl.tasks.options`); a bad option raises `OptionsError` before anything is made. The
    row records the config as made: the backend, `sandbox.local.unsafe` and the task's options
    resolved, and what was settled (`RunSetup`).
    """
    # tasks import grading, which is heavy: only when needed
    from a2rl.tasks import base_model_name, check_data, prepare_workspace, task_of_run
    from a2rl.tasks.registry import DEFAULT_TASK

    if config is None:
        config = RunConfig.build(**fields)
    elif fields:
        raise TypeError("give create_run a RunConfig or its fields, not both")
    config = config.with_task(DEFAULT_TASK)
    from a2rl.grading.frozen import freeze, honour

    # the run's options resolved once, now (or by the CLI before its checks) and pinned:
    # nothing after reads them from settings again; a bad one fails before anything is made
    task = task_of_run(config.task_id, config.profile, config.task_options,
                       resolved=config.task_options_resolved, settings=settings)
    options = task.options_record()
    # what decides every score of the run besides the checkpoint, frozen now: its baseline
    # and every later evaluation, on any process, are graded under it
    evaluation = freeze(task, settings)
    budget_s = parse_duration(config.budget or task.spec.default_budget
                              or settings.default_budget)
    backend = config.backend or settings.sandbox.backend
    # what can fail for the task's inputs fails here, before anything is made: the base model
    # (fetched once) and the data (TaskDataError: missing, not in the schema, too small)
    base_model = task.base_model_dir(settings)
    check_data(task, settings)
    run_id = new_run_id()
    root = settings.runs_dir / run_id
    workspace = root / "workspace"
    with contextlib.ExitStack() as undo:
        # a run that fails to be made leaves nothing: its folder goes (after its volume's
        # mount, the callbacks run last first); the maker file tells `a2rl gc` whose folder
        # this is while the row does not exist yet
        undo.callback(shutil.rmtree, root, ignore_errors=True)
        workspace.mkdir(parents=True)
        (root / MAKER_FILE).write_text(process_owner())
        disk_volume = volume.workspace_volume(settings.sandbox.disk_volume, settings.sandbox.disk,
                                              base_model, root, workspace)
        if disk_volume:  # a run that fails to be made leaves no mount behind
            undo.callback(volume.detach, root, workspace)
        prepare_workspace(task, workspace, settings)  # a2rl.layout's, and the task's parts
        unsafe = (local_unsafe(settings) if config.unsafe_local is None
                  else config.unsafe_local)
        scores = {}
        if baseline:
            from a2rl.grading import ensure_baseline

            scores = ensure_baseline(store, task, task.base_model_dir(settings),
                                     honour(settings, evaluation, check_judge=False))
        token, token_hash = new_token()
        made = config.model_copy(update={
            "backend": backend, "unsafe_local": unsafe, "task_options": options,
            "task_options_resolved": True,
            "evaluation": evaluation,
            "setup": RunSetup(
                baseline_evaluations={split: ev.id for split, ev in scores.items()},
                allow_unisolated=unsafe or task.spec.toy, disk_volume=disk_volume,
                readonly_paths=list(task.spec.readonly_paths),
                # what the backend fixes now (a container's image and limits), or nothing
                sandbox=run_options(backend, settings, SandboxChoices(
                    task_image=task.spec.sandbox_image, gpus=config.gpus,
                    share_gpus=config.share_gpus, keep_container=config.keep_container)))})
        run = runs.create(
            store, start_clock=start_clock,
            id=run_id, workspace=str(workspace), token_hash=token_hash, budget_s=budget_s,
            base_model=base_model_name(task, settings), **made.row_values(), config=made,
            owner=process_owner(),  # the maker finalizes it; a server takes it when it is gone
            baseline_dev=scores["dev"].score if scores else None,
            baseline_test=scores["test"].score if scores else None,
        )
        RevisionScanner(store, run_id, workspace.resolve(), settings.recording.revision_exclude,
                        settings.recording.revision_max_bytes).record_initial()
        run_logger(run_id, root / "run.log").info(
            "run created: task=%s profile=%s backend=%s budget=%.0fs", config.task_id,
            config.profile, backend, budget_s)
        undo.pop_all()  # made: its volume stays mounted while it lives
    (root / MAKER_FILE).unlink(missing_ok=True)  # the row says whose it is now
    return CreatedRun(run=run, token=token)


def _audit(settings: Settings, store: Store, run_id: str, log: logging.Logger) -> None:
    """Audit the finished run and store it; an audit never fails a run's finish."""
    from a2rl.audit.run import audit_run

    try:
        report = audit_run(store, run_id, settings)
    except Exception:  # noqa: BLE001 - the run is finished whatever its audit does
        log.exception("run %s: audit failed", run_id)
        return
    log.info("run %s audited: %d flags, %d high", run_id, len(report.flags), report.high)


def _stages(settings: Settings, store: Store, run_id: str, log: logging.Logger) -> None:
    """Score the final lineage's stages the agent never submitted (stage attribution);
    never fails a run's finish."""
    from .stages import score_unsubmitted_stages

    try:
        if n := score_unsubmitted_stages(settings, store, run_id):
            log.info("run %s: %d stages it never submitted scored", run_id, n)
    except Exception:  # noqa: BLE001 - the run is finished whatever its stages do
        log.exception("run %s: scoring its stages failed", run_id)


def _ledger(store: Store, run_id: str, log: logging.Logger) -> None:
    """The ledger's part the run's rows give (jobs, grading time); never fails a finish."""
    from a2rl.store import ledger

    try:
        ledger.record(store, run_id, ledger.run_resources(store, run_id, None))
    except Exception:  # noqa: BLE001 - the run is finished whatever its ledger does
        log.exception("run %s: ledger failed", run_id)


def _access(store: Store, run_id: str, run_dir: Path, log: logging.Logger) -> None:
    """The rest of the run's access journal into the store, before the audit reads it (the
    recorder read every event its jobs left before it ended); never fails a finish."""
    try:
        ingest_access(store, run_id, access_folder(run_dir))
    except Exception:  # noqa: BLE001 - the run is finished whatever its record does
        log.exception("run %s: the access record could not be read", run_id)


def finish_run(settings: Settings, store: Store, run_id: str, reason: str = "finished",
               end_kind: EndKind | None = None) -> Run:
    """Stop the run's sandbox and jobs, record what they left, close the run (its `end_kind`
    as given, or derived from `reason` and the row), write its ledger's resources and audit
    it. Idempotent."""
    with store.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise KeyError(f"run {run_id!r} does not exist")
        if run.ended_at is not None:
            return run
    rt = build_runtime(settings, store, run)
    # jobs a grader froze for a paused clock (one grading now, or one that died mid-freeze)
    # would not die until thawed: the supervisor's shutdown would wait for them in vain
    cgroup = RunCgroup(run_id)
    cgroup.freeze_jobs(False)
    cause, evidence = stop_cause(reason)
    stop_all(rt, cause=cause, evidence=evidence)
    # a supervisor that ended itself at the deadline is not stopped again (no sandbox is
    # left to stop), and its empty cgroup stayed behind
    if cgroup.exists and cgroup.kill_all():
        cgroup.remove()
    _access(store, run_id, rt.dir, rt.log)  # complete now: its recorder ended with the sandbox
    rt.scanner.scan("scan")
    rt.clock.set_status(RunStatus.finalizing)
    finalize_scores(settings, store, run_id)
    _stages(settings, store, run_id, rt.log)  # while the workspace's files are still mounted
    run = rt.clock.close(reason, end_kind=end_kind)
    _ledger(store, run_id, rt.log)
    _audit(settings, store, run_id, rt.log)  # while the workspace's files are still mounted
    # A finished run holds no kernel resource: its volume's mount and loop device go now (the
    # files stay in workspace.img; show, report, view and export read the store).
    held = volume.detach(rt.dir, Path(run.workspace))
    if held:
        rt.log.warning("run %s: volume still held by %s (a kept container?)", run_id, held)
    rt.log.info("run finished: %s", reason)
    return run
