"""DeepSearchQA's published figure (`TaskSpec.published` of the `paper` profile): the paper's
first abstract. docs/paper-fidelity.md, "Published numbers", has it with its caveats."""

from __future__ import annotations

from ..spec import PublishedFigure

PUBLISHED = (
    PublishedFigure(
        kind="improvement", value=0.0275, as_published="+2.75", base_model="Qwen/Qwen2.5-1.5B",
        metric="judged accuracy on the harness's eval split, final minus baseline, in points",
        label="paper v1", source="Agent^2 RL-Bench, arXiv 2604.10547v1 (April 2026), abstract: "
                                 "within evaluation noise",
        checked="from the paper's text, not checked against a file",
        note="within noise, as the paper says; 2.75 is no multiple of 0.5 (one of the 200 "
             "eval rows), so it was not measured on the split our paper profile uses: the "
             "harness moved to 100/200 on 2026-03-19 (d0f5b715; before, 100/800); the "
             "abstract names no base model: this is our paper profile's default, "
             "Qwen/Qwen2.5-1.5B"),
)
