"""DeepSearchQA's `paper` profile: the reference harness's ReAct loop, as raw completion.

The harness (microsoft/RD-Agent, rdagent/scenarios/rl/autorl_bench/benchmarks/deepsearchqa/
eval.py: `DeepSearchQAEvaluator.run_eval` and `_react_loop`) answers each question so:

- the prompt is raw text (vLLM `generate`, no chat template): `REACT_SYSTEM_PROMPT`, a blank
  line, then `"Question: {question}\\nAnswer type: {answer_type}\\n\\nThought:"`;
- each of at most 6 steps generates greedily, at most 256 new tokens, stopped at
  `"\\nAction:"`, `"\\nThought:"` or `"\\nObservation:"`; the completion, stripped, is appended
  after a space, and the **completion alone** is searched for
  `Action:\\s*(search|answer)\\[(.+?)\\]` (so an action on a line of its own, cut by the stop
  string, is never seen);
- no action: `"\\nAction: answer["` is appended and a forced answer generated (128 new tokens,
  stopped at `"]"`); it is the answer, unless it is the template's `your final answer`, which
  ends the step;
- `answer[...]` is the answer, unless it is `your final answer` (then `"\\nThat is not a valid
  answer. Please think again.\\nThought:"` is appended and the step ends); `search[...]` is
  searched and `"\\nObservation: {observation}\\nThought:"` appended;
- after 6 steps the answer is the last `Action: answer[...]` in the model's own completions
  (not the template's), else `I don't know`. Every answer is judged, an empty one included.

`REACT_SYSTEM_PROMPT` is RD-Agent's text: it is read from its wheel at run time
(`a2rl.tasks.rdagent.deepsearchqa_text`) and passed in as `text["system"]`. The observation
is our search backend's top results' snippets joined by `" | "` (the harness's SerpAPI
rendering of its top 3), or `No results found.`.

Standard library only, no package-relative imports: under the `paper` profile this file is
also written into the workspace as `env/deepsearchqa_paper.py`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

try:  # inside the workspace: env/a2rl_env.py is a sibling module
    from a2rl_env import Episode  # type: ignore[import-not-found]
except ImportError:  # inside the harness
    from a2rl.tasks.envapi.a2rl_env import Episode

MAX_STEPS = 6  # harness benchmarks/__init__.py: deepsearchqa eval_config max_steps
MAX_NEW_TOKENS = 256  # run_eval: SamplingParams(temperature=0.0, max_tokens=256, stop=STOP)
STOP = ("\nAction:", "\nThought:", "\nObservation:")
FORCED = "\nAction: answer["  # _react_loop: when the completion holds no action
FORCED_TOKENS = 128  # SamplingParams(temperature=0, max_tokens=128, stop=["]"])
FORCED_STOP = ("]",)
PLACEHOLDER = "your final answer"  # the template's answer, rejected
RETRY = "\nThat is not a valid answer. Please think again.\nThought:"
NO_ANSWER = "I don't know"
SEARCH_RESULTS = 3  # _serpapi_search: the top 3 results' snippets
NO_RESULTS = "No results found."
ACTION = re.compile(r"Action:\s*(search|answer)\[(.+?)\]", re.DOTALL)
ANSWER = re.compile(r"Action:\s*answer\[(.+?)\]", re.DOTALL)

SearchFn = Callable[[str], list[dict[str, Any]]]
Generate = Callable[[list[str], int, Sequence[str]], list[str]]


def initial_prompt(text: Mapping[str, str], question: str, answer_type: str) -> str:
    conversation = f"Question: {question}\nAnswer type: {answer_type}\n\nThought:"
    return f"{text['system']}\n\n{conversation}"


def render_observation(results: Sequence[Mapping[str, Any]]) -> str:
    snippets = [str(r.get("snippet") or r.get("text") or "") for r in results[:SEARCH_RESULTS]]
    return " | ".join(snippets) or NO_RESULTS


@dataclass
class PaperQuestion:
    """One question under the harness's loop: its growing prompt and the model's trace."""

    episode_id: str
    question: str
    answer_type: str
    search: SearchFn
    text: Mapping[str, str]
    max_steps: int = MAX_STEPS
    prompt: str = ""
    trace: str = ""
    steps: int = 0
    forced: bool = False  # the next generation is the forced answer
    answer: str | None = None
    record: Episode = field(init=False)

    def __post_init__(self) -> None:
        self.prompt = initial_prompt(self.text, self.question, self.answer_type)
        self.record = Episode(id=self.episode_id, observations=[self.prompt])

    @property
    def done(self) -> bool:
        return self.answer is not None

    def _trace(self, generated: str, first: bool) -> None:
        if first:
            self.trace += ("\n" + generated) if self.trace else generated
        elif generated:
            self.trace += "\n" + generated

    def _finish(self, answer: str) -> None:
        self.answer = answer
        self.record.actions.append(f"answer[{answer}]")
        self.record.observations.append(f"Answered: {answer}")
        self.record.rewards.append(0.0)
        self.record.done = True

    def _end_step(self) -> None:
        self.steps += 1
        if self.steps >= self.max_steps and self.answer is None:  # the loop's end
            real = [a.strip() for a in ANSWER.findall(self.trace)
                    if a.strip().lower() != PLACEHOLDER]
            self._finish(real[-1] if real else NO_ANSWER)

    def on_completion(self, completion: str) -> None:
        """A step's completion (stopped at the STOP strings)."""
        generated = completion.strip()
        self.record.outputs.append(completion)
        self._trace(generated, first=True)
        self.prompt += f" {generated}"
        match = ACTION.search(generated)
        if not match:
            self.prompt += FORCED
            self.forced = True
            return
        kind, content = match.group(1), match.group(2).strip()
        if kind == "answer":
            if content.lower() == PLACEHOLDER:
                self.prompt += RETRY
                self.record.actions.append(f"answer[{content}]")
                self.record.observations.append("That is not a valid answer.")
                self.record.rewards.append(0.0)
                self._end_step()
                return
            self._finish(content)
            return
        try:
            observation = render_observation(self.search(content))
        except Exception as exc:  # noqa: BLE001 - as the harness's search functions answer
            observation = f"Search error: {exc}"
        self.record.actions.append(f"search[{content}]")
        self.record.observations.append(observation)
        self.record.rewards.append(0.0)
        self.prompt += f"\nObservation: {observation}\nThought:"
        self._end_step()

    def on_forced(self, completion: str) -> None:
        """The forced answer's completion (stopped at `]`)."""
        generated = completion.strip()
        self.record.outputs.append(completion)
        self._trace(generated, first=False)
        self.forced = False
        if generated.strip().lower() == PLACEHOLDER:
            self.record.actions.append(f"answer[{generated}]")
            self.record.observations.append("That is not a valid answer.")
            self.record.rewards.append(0.0)
            self._end_step()  # the harness `continue`s with the forced text in the prompt
            return
        self._finish(generated.strip())


def play(ids: Sequence[str], questions: Sequence[str], answer_types: Sequence[str],
         search: Callable[[], SearchFn], text: Mapping[str, str], generate: Generate,
         max_steps: int = MAX_STEPS, max_new_tokens: int = MAX_NEW_TOKENS,
         stop: Sequence[str] = STOP, forced_tokens: int = FORCED_TOKENS,
         forced_stop: Sequence[str] = FORCED_STOP) -> list[Episode]:
    """Answer every question with the harness's loop, all stepped together: per round one
    `generate(prompts, max_new_tokens, stop)` call over the questions due a step, then one
    over those due a forced answer. A search that fails is observed as the harness's search
    functions report it (`Search error: ...`); any other failure ends its own episode."""
    qs = [PaperQuestion(i, q, t, search(), text, max_steps)
          for i, q, t in zip(ids, questions, answer_types, strict=True)]
    while True:
        due = [q for q in qs if not q.done and q.record.error is None]
        if not due:
            break
        for q, out in zip(due, generate([q.prompt for q in due], max_new_tokens, stop),
                          strict=True):
            try:
                q.on_completion(out)
            except Exception as exc:  # noqa: BLE001 - one question must not stop the others
                q.record.done, q.record.error = True, f"{type(exc).__name__}: {exc}"[:500]
        forced = [q for q in due if q.forced and q.record.error is None]
        if forced:
            for q, out in zip(forced, generate([q.prompt for q in forced], forced_tokens,
                                               forced_stop), strict=True):
                q.on_forced(out)
    return [q.record for q in qs]
