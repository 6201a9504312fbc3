"""The reference agent: a deterministic, scripted MCP client that behaves like a sensible agent.

It sees only what any agent sees (the tools, TASK.md, the workspace) and follows one plan:
read the task, look at the data, write a TRL SFT script, train in the background while
polling, submit, read the score, then try one improvement (GRPO with an exact-match reward
on top of the SFT model; on an interactive task whose workspace has `env/`, online GRPO
with rollouts through the environment API instead), submit again and stop. Nothing in it
depends on a seed or on one data file, so it improves any `arith` run.

Each training stage is sized to the budget: the agent reads what is left (budget_status), keeps
a reserve for grading the submission, and gives the script the rest as `--time-limit`; the
script measures its steps per second and trains fewer steps when the planned ones would not fit
(reference_scripts/timefit.py). GRPO runs only when enough time is left after the SFT score.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Literal

from mcp import Client
from pydantic import Field

import a2rl

from .base import AgentContext, BaseConnector
from .options import AgentOptions
from .scripted import AgentError, Say, ScriptedAgent

#: SFT settings for the demonstrations of an interactive task (longer prompts, fewer rows).
SFT_ENV_ARGS = "--max-length 128 --holdout 0 --steps 100 --batch 32"
#: of the time left when a stage starts, what is kept for submitting and grading its checkpoint
#: (a share, since a loaded machine grades slowly too, and at least a floor)
RESERVE_SHARE = 0.2
RESERVE_MIN_S = 40.0
#: the least training time worth giving GRPO; with less the agent stops at the SFT submission
GRPO_MIN_S = 90.0


def stage_limit(remaining_s: float) -> float:
    """Seconds a training stage (its script from start to saved checkpoint) may take when
    `remaining_s` are left, so that its submission is graded before the deadline."""
    return max(0.0, remaining_s - max(RESERVE_MIN_S, RESERVE_SHARE * remaining_s))


def script(name: str) -> str:
    return resources.files("a2rl.clients").joinpath("reference_scripts", name).read_text()


class ReferenceAgent(ScriptedAgent):
    def __init__(self, client: Client, say: Say = lambda _m: None,
                 sft_args: str = "", grpo_args: str = "", sft_only: bool = False) -> None:
        super().__init__(client, say)
        self.sft_args, self.grpo_args = sft_args, grpo_args
        self.sft_only = sft_only  # stop after the first submission (short runs for tests)

    async def time_limit(self) -> float:
        """This stage's `--time-limit`, from the budget left now."""
        left = (await self.tool("budget_status"))["remaining_s"]
        limit = stage_limit(left)
        self.say(f"{left:.0f} s of budget left: this stage gets {limit:.0f} s")
        return limit

    async def train(self, command: str) -> bool:
        return (await self.run_job(command))[0]

    async def run(self) -> dict[str, Any]:
        task = (await self.client.read_resource("a2rl://task")).contents[0]
        self.say(f"read TASK.md ({len(getattr(task, 'text', ''))} chars)")
        files = await self.tool("list_files", path=".", depth=2)
        self.say(f"workspace has {len(files['entries'])} entries")
        # an interactive (level-3) task ships its environment API in env/: learn online there
        interactive = any(e["path"] == "env/" for e in files["entries"])
        # the fields of the first row; a row can be longer than read_file shows of a line
        fields = await self.tool("run_command", wait_s=30, command=(
            "head -n 1 data/train.jsonl | python -c "
            "'import json, sys; print(sorted(json.load(sys.stdin)))'"))
        self.say(f"training data fields: {fields['output'].strip()}")

        await self.tool("edit_file", path="code/timefit.py", new_text=script("timefit.py"))
        await self.tool("edit_file", path="code/sft.py", new_text=script("sft.py"))
        self.say("wrote code/sft.py; training SFT in the background")
        extra = SFT_ENV_ARGS if interactive else ""
        limit = await self.time_limit()
        ok = await self.train("python code/sft.py --base base_model --data data/train.jsonl "
                              f"--out output/sft --time-limit {limit:.0f} {extra} "
                              f"{self.sft_args}")
        if not ok:
            raise AgentError("SFT training failed")
        first_score = await self.submit("output/sft", "SFT on the training split")
        if self.sft_only:
            return {"sft": first_score, "grpo": None}
        limit = await self.time_limit()
        if limit < GRPO_MIN_S:
            self.say("too little time left for GRPO: stopping with the SFT submission")
            return {"sft": first_score, "grpo": None}

        if interactive:
            await self.tool("edit_file", path="code/grpo_env.py", new_text=script("grpo_env.py"))
            self.say("wrote code/grpo_env.py; online GRPO through env/ on top of SFT")
            ok = await self.train("python code/grpo_env.py --init output/sft --out output/grpo "
                                  f"{self.grpo_args}")
        else:
            await self.tool("edit_file", path="code/grpo.py", new_text=script("grpo.py"))
            self.say("wrote code/grpo.py; GRPO with an exact-match reward on top of SFT")
            ok = await self.train("python code/grpo.py --init output/sft --data data/train.jsonl "
                                  f"--out output/grpo --time-limit {limit:.0f} {self.grpo_args}")
        second_score = await self.submit("output/grpo", "GRPO on top of SFT") if ok else None
        budget = await self.tool("budget_status")
        self.say(f"done after {budget['used_s']:.0f} s of budget")
        return {"sft": first_score, "grpo": second_score}


class ReferenceOptions(AgentOptions):
    """Extra arguments for its scripts (fewer steps on a small task) and where it stops."""

    sft_args: str = Field("", description="arguments added to `python code/sft.py` (e.g. "
                          "`--steps 5 --batch 4`)")
    grpo_args: str = Field("", description="arguments added to its GRPO script (e.g. "
                           "`--steps 1 --prompts 2`)")
    stages: Literal["sft", "sft+grpo"] = Field("sft+grpo", description="sft: stop after the "
                                               "SFT submission; sft+grpo: GRPO on top, "
                                               "submitted again")


class ReferenceConnector(BaseConnector):
    """`--agent reference`: the scripted agent above, run in-process. It keeps no transcript
    (its plan is fixed; the server's tool calls are the record) and reports its progress
    through `ctx.say`."""

    name = "reference"
    title = "Reference agent (scripted, deterministic)"
    kind = "inprocess"
    options_model = ReferenceOptions

    def version(self) -> str | None:
        return a2rl.__version__

    async def run(self, client: Client, ctx: AgentContext) -> None:
        # extra script arguments (e.g. fewer steps on a fixture-sized task); stages=sft
        # stops after the SFT submission
        opts = ReferenceOptions.parse(self.name, ctx.options)
        await ReferenceAgent(client, ctx.say, sft_args=opts.sft_args, grpo_args=opts.grpo_args,
                             sft_only=opts.stages == "sft").run()
