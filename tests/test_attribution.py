"""Stage attribution, pure: each stage of the final checkpoint's lineage with its score, its
gain over the stage before and the paired interval, and which stages the agent never saw
(`a2rl.analysis.attribution`); the stages a finish must score (`server.run.stages`). The
demo's attribution (SFT over the base, GRPO over SFT) is checked on the demo run
(tests/test_demo.py)."""

from __future__ import annotations

from a2rl.analysis.attribution import StageScore, attribute, route_gains
from a2rl.server.run.stages import unsubmitted_stages
from a2rl.store import Evaluation
from a2rl.store.lineage import Lineage, LineageStage


def _ev(ev_id: int, correct: list[bool]) -> Evaluation:
    items = [{"id": str(i), "correct": c} for i, c in enumerate(correct)]
    return Evaluation(id=ev_id, split="dev", score=sum(correct) / len(correct), items=items,
                      provenance={"engine": "e", "generation": {"max_new_tokens": 8}})


def _lineage() -> Lineage:
    return Lineage(checkpoint="output/grpo", complete=True, stages=[
        LineageStage(checkpoint="output/grpo", how="trained", job_id="j-grpo",
                     content_sha256="c2", command="python code/grpo.py --init output/sft"),
        LineageStage(checkpoint="output/sft", how="trained", job_id="j-sft",
                     content_sha256="c1", command="python code/sft.py"),
        LineageStage(checkpoint="base_model", how="base")])


def test_each_stage_gains_over_the_one_before() -> None:
    base = _ev(1, [False] * 40)
    sft = _ev(2, [True] * 30 + [False] * 10)
    grpo = _ev(3, [True] * 34 + [False] * 6)
    a = attribute(_lineage(), {("j-sft", "c1"): StageScore(sft, None),
                               ("j-grpo", "c2"): StageScore(grpo, "s-2")},
                  base, {"j-sft": ("sft", "SFTTrainer"), "j-grpo": ("grpo", "GRPOTrainer")},
                  "dev", "arith")
    assert [s.checkpoint for s in a.stages] == ["output/sft", "output/grpo"]  # oldest first
    first, second = a.stages
    assert (first.route, first.score, first.gain) == ("sft", 0.75, 0.75)
    assert not first.seen_by_agent and first.submission_id is None  # scored after the run
    assert (second.route, second.seen_by_agent, second.submission_id) == ("grpo", True, "s-2")
    assert abs(second.gain - 0.1) < 1e-9  # type: ignore[operator]
    assert first.interval is not None and first.interval.low > 0  # clearly above the base
    assert second.interval is not None and second.interval.within_noise  # 4 items: noise
    assert a.complete and a.baseline == 0.0
    assert route_gains(a) == {"sft": 0.75, "grpo": second.gain}


def test_a_stage_without_a_score_leaves_its_gain_and_the_next_unknown() -> None:
    base = _ev(1, [False] * 10)
    grpo = _ev(3, [True] * 5 + [False] * 5)
    a = attribute(_lineage(), {("j-grpo", "c2"): StageScore(grpo, "s-2")}, base, {},
                  "dev", "arith")
    first, second = a.stages
    assert first.score is None and first.gain is None and "no score" in (first.note or "")
    assert second.gain is None and "stage before it has no score" in (second.note or "")
    assert first.route == "unknown" and not a.complete
    assert route_gains(a) == {}


def test_the_stages_a_finish_scores_are_those_never_submitted() -> None:
    final = _lineage()
    sft_submitted = Lineage(checkpoint="output/sft", complete=True, stages=[
        LineageStage(checkpoint="output/sft", how="trained", job_id="j-sft",
                     content_sha256="c1"), LineageStage(checkpoint="base_model", how="base")])
    assert [s.job_id for s in unsubmitted_stages(final, [final])] == ["j-sft"]
    assert unsubmitted_stages(final, [final, sft_submitted]) == []
    # the same folder overwritten before it was submitted is another checkpoint
    other = sft_submitted.model_copy(deep=True)
    other.stages[0].content_sha256 = "c1-later"
    assert [s.job_id for s in unsubmitted_stages(final, [final, other])] == ["j-sft"]


def test_the_seed_note_says_how_a_recipe_seeds_itself() -> None:
    from a2rl.analysis.replay_plan import seed_note
    from a2rl.clients.replay import ReplayStage

    reads = ReplayStage(job_id="j", command="python t.py",
                        files={"t.py": b"seed = int(os.environ['A2RL_SEED'])"})
    fixed = ReplayStage(job_id="j", command="python t.py --seed 3",
                        files={"t.py": b"torch.manual_seed(0)"})
    neither = ReplayStage(job_id="j", command="python t.py", files={"t.py": b"print(1)"})
    assert "reads $A2RL_SEED" in seed_note([reads, fixed])
    note = seed_note([fixed])
    assert "fixes its own seed (--seed 3, manual_seed(0))" in note and "differ only" in note
    assert "neither reads" in seed_note([neither])


def test_a_recipe_whose_code_was_not_kept_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A job of the recipe without a code snapshot (a run recorded before jobs kept theirs):
    one line, nothing made."""
    import pytest

    from a2rl.analysis.replay_plan import CannotReplay, plan_replay
    from a2rl.store import Job, JobFile, Run, Store, Submission, utcnow

    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    from a2rl.store.lineage import LineageFile

    lineage = Lineage(checkpoint="output/a", complete=True, files=[LineageFile(
        path="model.safetensors", sha256="0", job_id="j-a", how="trained")], stages=[
        LineageStage(checkpoint="output/a", how="trained", job_id="j-a"),
        LineageStage(checkpoint="base_model", how="base")])
    with store.session() as s:
        s.add(Run(id="r-old", task_id="arith", workspace="/x", budget_s=60, status="finished",
                  ended_at=utcnow(), final_submission_id="s-a"))
        s.add(Job(id="j-a", run_id="r-old", command="python train.py",
                  files_recorded="complete"))
        s.add(JobFile(run_id="r-old", job_id="j-a", path="output/a/model.safetensors",
                      written=True))
        s.add(Submission(id="s-a", run_id="r-old", path="output/a",
                         lineage=lineage.model_dump(mode="json")))
    with pytest.raises(CannotReplay, match="the code job j-a ran with was not kept"):
        plan_replay(store, "r-old")
    store.close()
