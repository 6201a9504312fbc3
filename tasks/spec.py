"""What a task *is*, as data: the `TaskSpec` shown by `a2rl tasks` and recorded with each run.

Kept separate from the task's behaviour (`a2rl.tasks.base.Task`) so the spec can be listed,
serialized and compared without importing torch or generating any data.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from a2rl.layout import READONLY_INPUTS


class SplitInfo(BaseModel):
    """One split of a task's data."""

    n_items: int = Field(description="number of items")
    visible: bool = Field(description="True when the agent sees it (written into the workspace)")
    source: str = Field("", description="how the items are produced or where they come from")


class GraderSettings(BaseModel):
    """How the grader generates: greedy, batched, bounded."""

    max_new_tokens: int = Field(16, description="generation length limit per item")
    stop: list[str] = Field(default_factory=list, description="output is cut at the first stop")
    batch_size: int = Field(256, description="prompts per generate call")

    def capped(self, max_new_tokens: int) -> GraderSettings:
        """These settings with the generation length cut to `max_new_tokens` (0: unchanged),
        for smoke runs on hardware that cannot afford the task's own length."""
        if max_new_tokens <= 0 or max_new_tokens >= self.max_new_tokens:
            return self
        return self.model_copy(update={"max_new_tokens": max_new_tokens})


class PublishedFigure(BaseModel):
    """A number the paper or its reference harness publishes for this task, with its source:
    set beside a run's measured one when the run matches it (`a2rl.tasks.published`)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["baseline", "final", "improvement"] = Field(
        description="baseline: the base model's test score; final: a run's final (best) test "
                    "score; improvement: final minus baseline")
    value: float = Field(description="on our scale: a fraction of the test split (the "
                                     "sources print percent); an improvement, a difference")
    as_published: str = Field(description='the figure as the source prints it ("21.61")')
    base_model: str = Field(description="the base model, as a run records it (a hub id)")
    profile: Literal["paper"] = Field(
        "paper", description="only a run of this profile is comparable: the harness's "
                             "evaluation, not ours")
    metric: str = Field(description="what the number measures, and on which items")
    label: str = Field(description="the source in a few words, as compare and reports print "
                                   "it")
    source: str = Field(description="the source in full: paper version and place, or the "
                                    "harness's file and commit")
    checked: str = Field(description="how the figure and its setting were verified, or that "
                                     "they were not")
    note: str = Field("", description="what limits the comparison")


class TaskSpec(BaseModel):
    """The static description of a task."""

    id: str
    level: int = Field(ge=1, le=3, description=(
        "1: verifiable answers (GSM8K, HumanEval), 2: judge-graded open-ended generation "
        "(AlpacaEval), 3: interactive, agentic environments (ALFWorld, WebShop, DeepSearchQA)"))
    title: str
    description: str = Field(description="markdown: TASK.md as the agent reads it")
    version: str = Field(description="bump when data, scoring or prompts change")
    prompt_version: str = Field("1", description="version of the prompt format")
    default_base_model: str = "tiny-llama"
    default_budget: str = "20m"
    splits: dict[str, SplitInfo] = Field(default_factory=dict)
    grader: GraderSettings = Field(default_factory=GraderSettings)
    sandbox_image: str = "a2rl-sandbox"
    toy: bool = Field(False, description="offline toy task: may run unisolated with a warning")
    readonly_paths: list[str] = Field(
        default_factory=lambda: list(READONLY_INPUTS),
        description="workspace folders the sandbox mounts read-only (a2rl.layout's inputs, "
                    "plus any of the task's own)")
    profile: str = Field("a2rl", description="the evaluation profile (a2rl.tasks.profiles)")
    notes: dict[str, str] = Field(
        default_factory=dict,
        description="named facts of the evaluation shown by `a2rl tasks --profile` (prompt "
                    "format, answer extraction, success threshold, judge...)")
    graded_by: Literal["match", "execution", "judge"] = Field(
        "match", description="how the grader reads a model's outputs: compared with answers, "
                             "executed (code hooks could fool it) or read by a judge model "
                             "(text addressed to the judge could); the audit's gaming check")
    public_test_ids: tuple[str, ...] = Field(
        (), description="names the hidden test split is published under (hub ids, file names): "
                        "naming one in a command or code reaches for the test split (the "
                        "audit's hidden-reach check; hub caches are found on their own)")
    published: tuple[PublishedFigure, ...] = Field(
        (), description="the paper's and the harness's figures for this profile of the task "
                        "(a `paper` spec's; docs/paper-fidelity.md, \"Published numbers\")")
