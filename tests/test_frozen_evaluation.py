"""A run's frozen evaluation config: every evaluation of the run is graded under the settings
the run was made with, whichever process (or fleet node) grades it; a process that cannot
honour them refuses in one line and records why; evaluations graded under different settings
are never paired into an interval."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.analysis.fmt import evaluation_config as describe
from a2rl.analysis.improvement import Scored, paired_improvement
from a2rl.grading import enqueue, process_one
from a2rl.grading.frozen import CannotHonour, freeze, honour, of_run
from a2rl.sections.base import Section
from a2rl.settings import Settings
from a2rl.store import Evaluation, EvaluationConfig, Run, RunConfig, Store, Submission
from a2rl.tasks import get_task

from .helpers import noisy_checkpoint_copy


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def ckpt(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A grader-owned copy of the base weights with noise (graded, not trained)."""
    return noisy_checkpoint_copy(Settings(home=home), tmp_path_factory.mktemp("ws"))


def _run(store: Store, settings: Settings, run_id: str = "r1") -> Run:
    """A run of arith whose evaluation config was frozen under `settings`."""
    task = get_task("arith")
    config = RunConfig(task_id="arith", evaluation=freeze(task, settings),
                       task_options=task.options_record(settings))
    with store.session() as s:
        run = Run(id=run_id, workspace="/nowhere", budget_s=600, config=config,
                  **config.row_values())
        s.add(run)
    return run


def _submit(store: Store, run_id: str, sub_id: str, copy: Path, split: str = "test") -> None:
    with store.session() as s:
        s.add(Submission(id=sub_id, run_id=run_id, path=f"output/{sub_id}",
                         checkpoint_dir=str(copy)))
    enqueue(store, run_id, sub_id, split)


def _evaluation(store: Store, sub_id: str) -> tuple[Evaluation, str]:
    """The submission's one evaluation, and the submission's status."""
    with store.session() as s:
        ev = s.exec(select(Evaluation).where(Evaluation.submission_id == sub_id)).one()
        sub = s.get(Submission, sub_id)
    assert sub is not None
    return ev, sub.status


def test_a_node_with_other_settings_grades_under_the_runs(home: Path, ckpt: Path,
                                                          tmp_path: Path) -> None:
    """The run is made under a generation cap of 3 tokens and the automatic engine; the node
    that grades it caps nothing and forces plain `generate`: the evaluation is graded with the
    run's cap and engine all the same, its provenance says so, and it pairs with a baseline
    graded under the run's settings."""
    made = Settings(home=home, grading={"max_new_tokens": 3})
    node = Settings(home=home, grading={"max_new_tokens": 0, "engine": "transformers",
                                        "checkpoint_check_timeout_s": 5})
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    run = _run(store, made)
    frozen = run.config.evaluation
    assert frozen is not None and frozen.grading.max_new_tokens == 3
    assert frozen.generation["max_new_tokens"] == 3 and frozen.engine == "static"
    graded = honour(node, frozen)
    assert (graded.grading.max_new_tokens, graded.grading.engine) == (3, "static")
    assert graded.grading.checkpoint_check_timeout_s == made.grading.checkpoint_check_timeout_s
    # the section whole, every key of it: a grading setting is the run's the day it exists
    assert graded.grading == frozen.grading == run.config.grading_settings(node.grading)
    _submit(store, "r1", "s1", ckpt)
    assert process_one(store, node, "node-b", timeout_s=240) is not None
    ev, _ = _evaluation(store, "s1")
    assert ev.status == "done", ev.error
    assert ev.provenance["generation"]["max_new_tokens"] == 3
    assert ev.provenance["engine"] == "transformers-static"
    # the same checkpoint graded as the node's own settings say differs: the interval says so
    from a2rl.grading.evaluate import evaluate

    other = evaluate(get_task("arith"), ckpt, "test", node)
    assert other.provenance["generation"]["max_new_tokens"] != 3
    final = Scored(ev.score or 0.0, ev.items, ev.metrics, ev.provenance)
    unpaired = Scored(other.score, [it.model_dump() for it in other.items], other.metrics,
                      other.provenance)
    interval, note = paired_improvement(final, unpaired, "arith")
    assert interval is None and note is not None
    assert "different settings" in note and "engine: transformers-static vs transformers" in note
    assert "max_new_tokens=3, stop=['</s>'] vs batch_size=256, max_new_tokens=8" in note
    same, why = paired_improvement(final, final, "arith")
    assert same is not None and why is None and same.estimate == 0.0
    store.close()


def test_a_process_that_cannot_honour_the_config_refuses_in_one_line(
        home: Path, ckpt: Path, tmp_path: Path) -> None:
    """An engine missing here, or a grader of another version: the evaluation is refused
    with one line saying why (recorded on the evaluation and the submission), and no grader
    process runs under other settings."""
    settings = Settings(home=home)
    store = Store(f"sqlite:///{tmp_path / 'b.db'}")
    run = _run(store, settings)
    assert run.config.evaluation is not None
    for run_id, change, says in (
            ("r-vllm", {"grading": run.config.evaluation.grading.model_copy(
                update={"engine": "vllm"})}, "grading_engine=vllm but vLLM is not installed"),
            ("r-old", {"grader_version": "1"}, "the run's evaluations are version 1")):
        frozen = run.config.evaluation.model_copy(update=change)
        with pytest.raises(CannotHonour, match=says):
            honour(settings, frozen)
        config = run.config.model_copy(update={"evaluation": frozen})
        with store.session() as s:
            s.add(Run(id=run_id, workspace="/nowhere", budget_s=600, config=config,
                      **config.row_values()))
        _submit(store, run_id, f"s-{run_id}", ckpt)
        assert process_one(store, settings, "w", timeout_s=60, run_id=run_id) is not None
        ev, status = _evaluation(store, f"s-{run_id}")
        assert ev.status == "failed" and ev.score is None
        assert ev.error is not None and "\n" not in ev.error and says in ev.error
        assert ev.error.startswith("cannot grade under the run's frozen evaluation config")
        assert status == "failed"
    store.close()


def test_a_run_made_before_runs_froze_it_reads_its_first_evaluation(home: Path,
                                                                    tmp_path: Path) -> None:
    """No `evaluation` in the run's config: its config is read from the provenance of the
    baseline it was made with, and shown as read from there."""
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    prov = {"task_id": "arith", "profile": "a2rl", "task_version": "3", "prompt_version": "1",
            "grader_version": "2", "engine": "transformers-static", "engine_version": "x",
            "generation": {"max_new_tokens": 8, "stop": [], "batch_size": 256},
            "max_new_tokens_cap": 8, "task_options": {"base_model": "tiny-llama"}}
    with store.session() as s:
        base = Evaluation(kind="baseline", split="test", score=0.1, provenance=prov)
        s.add(base)
        s.flush()
        config = RunConfig(task_id="arith")
        config.setup.baseline_evaluations = {"test": base.id}
        s.add(Run(id="r-old", workspace="/x", budget_s=60, config=config,
                  **config.row_values()))
    with store.session() as s:
        run = s.get(Run, "r-old")
        assert run is not None and run.config.evaluation is None
        frozen = of_run(s, run)
    assert frozen is not None and frozen.source == "provenance"
    assert (frozen.engine, frozen.grading.max_new_tokens, frozen.grader_version) == (
        "static", 8, "2")
    assert "first evaluation's provenance" in describe(frozen.model_dump(mode="json"))
    assert "not recorded" in describe(None)
    store.close()


def test_a_config_stored_before_it_held_the_grading_section_reads_as_one() -> None:
    """A run frozen by the previous version kept four grading values flat: they read as its
    grading section, and only those are the run's; a grading setting that record never held
    (the pending limit) comes from the process that reads it."""
    old = EvaluationConfig.model_validate({
        "task_id": "arith", "task_version": "3", "prompt_version": "1", "grader_version": "2",
        "engine": "static", "max_new_tokens_cap": 8, "check_memory_gib": 2.0,
        "check_timeout_s": 30.0, "generation": {"max_new_tokens": 8}})
    assert old.engine == "static" and old.grading.checkpoint_check_timeout_s == 30.0
    here = Settings(grading={"max_new_tokens": 0, "engine": "vllm", "max_pending_grades": 7,
                             "checkpoint_check_memory_gib": 9.0}).grading
    held = old.grading_over(here)
    assert (held.engine, held.max_new_tokens, held.checkpoint_check_memory_gib,
            held.checkpoint_check_timeout_s, held.max_pending_grades) == ("static", 8, 2.0,
                                                                          30.0, 7)
    again = EvaluationConfig.model_validate_json(old.model_dump_json())
    assert again.grading_over(here) == held and "max_new_tokens_cap" not in old.model_dump()


class TunedSettings(Section, place="grading.tuned-test"):
    temperature: float = 0.0
    seed: int = 1


class TunedDriver:
    """An engine with a section of its own (never built: only named and versioned here)."""

    settings_section = TunedSettings

    def identity(self, *, cuda: bool) -> tuple[str, str]:
        return "tuned", "1"

    def build(self, request: object) -> None:
        raise AssertionError("not built in this test")


def test_an_engines_own_section_is_frozen_whole_and_keys_the_baseline(
        home: Path, tmp_path: Path) -> None:
    """An engine's `[grading.<engine>]` decides what it generates: the run records the chosen
    engine's section whole (its defaults too), a grading process set otherwise grades under
    the run's, and a cached baseline graded under other values of it is not reused."""
    from a2rl.grading.baseline import baseline_key
    from a2rl.grading.engine_select import ENGINES

    ENGINES.register("tuned-test", TunedDriver)
    try:
        made = Settings(home=home, grading={"engine": "tuned-test",
                                            "tuned-test": {"temperature": 0.5}})
        frozen = freeze(get_task("arith"), made)
        assert frozen.grading.model_dump()["tuned_test"] == {"temperature": 0.5, "seed": 1}
        node = Settings(home=home, grading={"tuned_test": {"temperature": 0.9, "seed": 7}})
        graded = frozen.grading_over(node.grading)
        assert graded.section(TunedSettings) == TunedSettings(temperature=0.5, seed=1)
        base = tmp_path / "base"
        base.mkdir()
        (base / "model.safetensors").write_bytes(b"weights")
        task = get_task("arith")
        key = baseline_key(task, base, made)
        assert key == baseline_key(task, base, made.updated({"grading.tuned-test.seed": 1}))
        assert key != baseline_key(task, base, made.updated({"grading.tuned-test.seed": 2}))
    finally:
        ENGINES.unregister("tuned-test")


def test_a_judged_task_freezes_its_judge_without_credentials(home: Path) -> None:
    """AlpacaEval's scores come from a judge: the run records its endpoint and model, never a
    password in the URL; a grading process naming the same endpoint keeps its own URL (its
    credentials), and one whose judge does not answer refuses."""
    settings = Settings(home=home, judge={"base_url": "http://user:secret@127.0.0.1:9/v1",
                                          "model": "judge-x"})
    frozen = freeze(get_task("alpacaeval"), settings)
    assert frozen.judge is not None and frozen.judge.model == "judge-x"
    assert frozen.judge.base_url == "http://127.0.0.1:9/v1"
    assert "secret" not in frozen.model_dump_json()
    moved = Settings(home=home, judge={"base_url": "http://127.0.0.1:9/v1", "model": "other"})
    kept = honour(settings, frozen, check_judge=False)
    assert kept.judge.base_url == settings.judge.base_url and kept.judge.model == "judge-x"
    assert honour(moved, frozen, check_judge=False).judge.model == "judge-x"
    with pytest.raises(CannotHonour, match="the judge at http://127.0.0.1:9/v1 does not answer"):
        honour(moved, frozen)
    assert freeze(get_task("arith"), settings).judge is None
