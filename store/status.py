"""The states the store's rows move through, each defined once.

Why `StrEnum`s over plain `str` columns: the columns stay `VARCHAR` holding the same words as
ever (no migration, and analysts keep querying `status = 'graded'`), while code compares and
assigns named members, so a typo is an `AttributeError` instead of a branch never taken. A row
read back holds a plain `str`; a `StrEnum` member compares equal to it.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    created = "created"  # made with `a2rl create`; the clock starts at the first tool call
    running = "running"  # the budget clock runs
    finalizing = "finalizing"  # jobs stopped; queued grading and the final score in progress
    finished = "finished"
    failed = "failed"  # an `a2rl fleet` run whose node was lost before it could finalize


class RunKind(StrEnum):
    """What made a run: an agent (`a2rl run`, `a2rl create`, a fleet), or `a2rl replay`
    re-running another run's recipe without its agent. Replays are counted apart from agent
    results everywhere."""

    agent = "agent"
    replay = "replay"


class GradingClock(StrEnum):
    """Whether grading time counts against the budget (`counted`) or moves the deadline by as
    much (`paused`)."""

    counted = "counted"
    paused = "paused"


class Protocol(StrEnum):
    """What the agent learns while it works (`RunConfig.feedback_split`): `heldout` scores
    its submissions on the dev split and the test split only at the end; `paper` scores test
    every time, as the reference harness does."""

    heldout = "heldout"
    paper = "paper"


class Profile(StrEnum):
    """The evaluation profile a run's task is built for (`a2rl.tasks.profiles`, which spells
    the same words: the tasks do not import the store): `a2rl`, ours, or `paper`, the
    reference harness's. Independent of the protocol."""

    a2rl = "a2rl"
    paper = "paper"


class SubmissionStatus(StrEnum):
    validating = "validating"  # reserved (counted against the limit), being copied and checked
    refused = "refused"
    queued = "queued"
    grading = "grading"
    graded = "graded"
    failed = "failed"


class EvaluationStatus(StrEnum):
    done = "done"
    failed = "failed"


class EvaluationKind(StrEnum):
    submission = "submission"
    baseline = "baseline"
    #: a second reading of a run's final checkpoint or base model under another profile
    #: (`a2rl regrade --profile`): kept beside the run's scores, never one of them
    reading = "reading"
    #: a stage of the final checkpoint's lineage the agent never submitted, scored on the
    #: feedback split when the run finished (stage attribution; never seen by the agent)
    stage = "stage"


class GradeState(StrEnum):
    """A grading queue row: `leased` while a grader holds it (until `lease_until`)."""

    queued = "queued"
    leased = "leased"
    done = "done"
    failed = "failed"


class AgentStatus(StrEnum):
    """How the agent's process ended, as the orchestrator saw it (`run.agent_status`)."""

    finished = "finished"  # exited 0 (an in-process agent: returned)
    crashed = "crashed"  # exited non-zero, or raised; `agent_exit_code` says how
    budget = "budget"  # still running at the deadline: stopped
    interrupted = "interrupted"  # the orchestrator was interrupted (Ctrl-C, a fleet stopping)


class EndKind(StrEnum):
    """Why a run ended, in the five kinds a comparison tells apart (`run.end_kind`; for a run
    closed before the column existed, derived from its row: `a2rl.store.outcome.end_kind`).
    `end_reason` keeps the free text ("agent crashed (exit 1)", "interrupted (SIGTERM)")."""

    agent_finished = "agent_finished"  # the agent stopped by itself (or its operator closed it)
    budget_exhausted = "budget_exhausted"  # the deadline came first
    interrupted = "interrupted"  # stopped from outside: Ctrl-C, a signal, a fleet stopping
    agent_crashed = "agent_crashed"  # the agent's process failed
    infrastructure = "infrastructure"  # a2rl's side failed: a lost node, an abandoned fleet run


#: The end kinds whose runs are results (compared and summarized by default): the agent had
#: its chance, to its own end or the budget's. An interrupted, crashed or infrastructure-failed
#: run says nothing about what the agent can do.
RESULT_KINDS = frozenset({EndKind.agent_finished, EndKind.budget_exhausted})

#: How each kind reads in a sentence ("not counted: 3 interrupted, 1 agent crashed").
END_KIND_WORDS = {EndKind.agent_finished: "agent finished",
                  EndKind.budget_exhausted: "budget exhausted",
                  EndKind.interrupted: "interrupted", EndKind.agent_crashed: "agent crashed",
                  EndKind.infrastructure: "infrastructure failure"}


class JobState(StrEnum):
    running = "running"
    exited = "exited"  # ended by itself; exit_code says how
    killed = "killed"  # by job_kill, a budget stop or the sandbox stopping
    timeout = "timeout"  # killed at the run's deadline
    lost = "lost"  # the supervisor that ran it is gone; its fate is unknown


class JobEndCause(StrEnum):
    """Why a job ended (`Job.end_cause`), from evidence (`Job.end_evidence`), never from the
    exit code alone: a SIGKILL is a kill by the budget, the agent, the operator or the kernel's
    out-of-memory killer, and only the one who sent it knows which."""

    exited = "exited"  # ended by itself; exit_code says how
    signal = "signal"  # killed by a signal a2rl did not send (from inside the job)
    out_of_memory = "out_of_memory"  # the kernel's OOM killer (the cgroup's oom_kill count rose)
    limit = "limit"  # a limit of the supervisor: processes, disk, log flood, file size
    job_kill = "job_kill"  # the agent's job_kill
    deadline = "deadline"  # the run's time limit: the supervisor stopped it at the deadline
    budget = "budget"  # the run was finalized because its budget ran out
    interrupted = "interrupted"  # interrupted by the operator (Ctrl-C, SIGTERM, a fleet stop)
    run_finished = "run_finished"  # the run was finished (by the agent or `a2rl finish`)
    lost = "lost"  # the supervisor that ran it is gone; nobody saw how it ended


class BudgetEventKind(StrEnum):
    clock_start = "clock_start"
    grading = "grading"  # one evaluation's grading time (detail: seconds, submission, split)
    exhausted = "exhausted"  # the deadline passed; jobs were stopped
    finished = "finished"  # the run was closed (detail: reason)
    #: one submission checked for the run, refused ones too (detail: submission id, outcome,
    #: the CPU seconds it cost: the server's thread and the validating process)
    validation = "validation"
    #: a revision scan stopped before it saw the whole workspace (detail: why, its cap, the
    #: scan's source, tool call and job): what it did not see has no revision, and nothing it
    #: did not see was recorded as deleted (a2rl.tools.revisions)
    scan_stopped = "scan_stopped"
