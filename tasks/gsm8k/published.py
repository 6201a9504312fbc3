"""GSM8K's published figures (`TaskSpec.published` of the `paper` profile): the reference
harness's README, the only GSM8K numbers it prints. docs/paper-fidelity.md, "Published
numbers", has them in a table with their caveats."""

from __future__ import annotations

from ..spec import PublishedFigure

_README = ("microsoft/RD-Agent rdagent/scenarios/rl/autorl_bench/README.md at 471eb30d "
           "(main; the text unchanged since 3f249255): the results.csv example")
_METRIC = ("accuracy on GSM8K's 1,319 test problems, OpenCompass gsm8k_gen_1d7fe4 (the "
           "harness's eval config), in percent")
_EXAMPLE = ("an example of the results log's format rather than a reported measurement: the "
            "same rows named Qwen/Qwen2.5-0.5B from 761c07d9 (2026-02-11) until 82afa6b0 "
            "(2026-03-17, merged as 3f249255) renamed the model and kept the numbers")
_BEST = ("the best test score of {n} submissions in 3,600 s (the harness keeps a run's "
         "highest): set beside a --protocol paper run's final; ")


def _best_row(row: str, value: float, *, submissions: int, correct: int) -> PublishedFigure:
    """A row's best_score: `correct` of the 1,319 problems, the best of `submissions`."""
    percent = f"{value * 100:.2f}"
    return PublishedFigure(
        kind="final", value=value, as_published=percent, base_model="Qwen/Qwen2.5-1.5B",
        metric=_METRIC, label=f"harness README, {row} row",
        source=f"{_README}, best_score of the {row} row",
        checked=f"checked against the file ({correct} of 1,319 is {percent}%)",
        note=_BEST.format(n=submissions) + _EXAMPLE)


PUBLISHED = (
    PublishedFigure(
        kind="baseline", value=0.2161, as_published="21.61", base_model="Qwen/Qwen2.5-1.5B",
        metric=_METRIC, label="harness README", source=f"{_README}, baseline column",
        checked="checked against the file: both rows give baseline 21.61 for "
                "Qwen/Qwen2.5-1.5B (285 of 1,319 is 21.61%)",
        note=_EXAMPLE),
    _best_row("openhands", 0.2237, submissions=3, correct=295),
    _best_row("rdagent", 0.2312, submissions=7, correct=305),
)
