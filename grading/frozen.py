"""A run's frozen evaluation config: made once when the run is made, honoured by every
evaluation of the run wherever it runs.

Why: the grading process used to hand its worker its *own* settings (engine, generation cap,
judge, checkpoint-check limits), so a `config.toml` changed mid-run, or another node of a
fleet, scored the baseline and the final under different settings, and the paired
improvement paired them anyway. Now `freeze` records everything that decides a score besides
the checkpoint in the run's `RunConfig.evaluation`; `honour` lays it over whichever process's
settings grade, or refuses in one line (the engine missing here, the judge unreachable, a
grader of another version) so that nothing is ever graded under other settings. Runs made
before this read their config from their first evaluation's provenance
(`a2rl.store.queries.evaluation_config`, re-exported here as `of_run`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from a2rl.llm import unreachable
from a2rl.sections import GradingSettings
from a2rl.sections.base import table_key
from a2rl.settings import Settings
from a2rl.store import EvaluationConfig, JudgeIdentity
from a2rl.store.queries import evaluation_config as of_run

from .engine_select import (
    EngineUnavailable,
    choose_engine,
    chosen_engine,
    cuda_available,
    engine_identity,
    engine_section,
    vllm_available,
)
from .evaluate import GRADER_VERSION
from .seam import GradedTask

__all__ = ["CannotHonour", "freeze", "honour", "of_run", "without_credentials"]


class CannotHonour(RuntimeError):
    """This process cannot grade under a run's frozen evaluation config (one line: why, and
    what to do)."""


def without_credentials(url: str) -> str:
    """`url` without a user and password: what a record may keep of an endpoint."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def freeze(task: GradedTask, settings: Settings) -> EvaluationConfig:
    """The evaluation config of a run of `task` made under `settings` (the engine's "auto"
    resolved on this machine). Raises `EngineUnavailable` when the engine asked for cannot run
    here: such a run could never be graded."""
    kind = chosen_engine(settings)
    name, version = engine_identity(kind, cuda=cuda_available())
    # the section whole (every key set, so that `grading_over` takes none from elsewhere), and
    # the chosen engine's own section whole too, its defaults included
    recorded = {**settings.grading.model_dump(), "engine": kind}
    if (own := engine_section(kind)) is not None:
        recorded[table_key(kind)] = settings.grading.section(own).model_dump(mode="json")
    grading = GradingSettings.model_validate(recorded)
    spec = task.spec
    judged = getattr(spec, "graded_by", "match") == "judge"
    return EvaluationConfig(
        task_id=spec.id, task_version=spec.version, prompt_version=spec.prompt_version,
        profile=task.profile, task_options=task.options_record(settings),
        grader_version=GRADER_VERSION, grading=grading, engine_name=name,
        engine_version=version,
        generation=spec.grader.capped(grading.max_new_tokens).model_dump(),
        judge=JudgeIdentity(base_url=without_credentials(settings.judge.base_url),
                            model=settings.judge.model) if judged else None,
        hidden_splits=task.hidden_split_identity(settings))


def honour(settings: Settings, frozen: EvaluationConfig, *, regrade: bool = False,
           check_judge: bool = True) -> Settings:
    """`settings` with the run's frozen evaluation config laid over them: what the grader's
    worker and the checkpoint check run under. `CannotHonour` when this process cannot: the
    engine kind is not available here, its grader is of another version (unless `regrade`:
    today's grader under the run's config), or the judge does not answer."""
    try:
        choose_engine(frozen.engine, cuda=cuda_available(), vllm=vllm_available())
    except EngineUnavailable as exc:
        raise CannotHonour(f"cannot grade under the run's frozen evaluation config: {exc}"
                           ) from None
    if not regrade and frozen.grader_version != GRADER_VERSION:
        raise CannotHonour(
            f"cannot grade under the run's frozen evaluation config: this a2rl's grader is "
            f"version {GRADER_VERSION}, the run's evaluations are version "
            f"{frozen.grader_version} (grade it with that a2rl, or `a2rl regrade` it after)")
    honoured = settings.model_copy(update={"grading": frozen.grading_over(settings.grading)})
    update: dict[str, Any] = {}
    if frozen.judge is not None:
        # this process's own URL when it names the same endpoint: it may hold credentials
        # the record leaves out
        ours = settings.judge.base_url
        url = ours if without_credentials(ours) == frozen.judge.base_url else frozen.judge.base_url
        if check_judge and (why := unreachable(url)) is not None:
            raise CannotHonour(f"cannot grade under the run's frozen evaluation config: the "
                               f"judge at {frozen.judge.base_url} does not answer ({why})")
        update |= {"judge.base_url": url, "judge.model": frozen.judge.model}
    return honoured.updated(update) if update else honoured
