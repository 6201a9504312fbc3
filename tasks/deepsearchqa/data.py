"""DeepSearchQA's questions and their splits (ours, and the paper harness's).

Source: the dataset `google/deepsearchqa` on the Hugging Face hub, file `DSQA-full.csv` (900
rows: `problem`, `problem_category`, `answer`, `answer_type` = `Single Answer` or
`Set Answer`), or `deepsearchqa_dir` holding that file. Split, `a2rl` profile: the rows are
shuffled with `random.Random(42)` (our own shuffle: not the harness's, despite the same seed);
the first 100 are the visible train split, the next 200 the test split, and dev is the next 100
of the 600 left over. `paper` profile: the reference harness's shuffle, `datasets`'
`Dataset.shuffle(seed=42)` (autorl_bench/benchmarks/deepsearchqa/data.py: `split_dataset`), the
same 100 / 200 boundaries, and dev again the next 100. A smaller copy (a fixture) keeps the
proportions: a quarter each for train, test and dev.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

from a2rl.settings import Settings

from ..data_files import hub_file
from .options import DeepSearchQAOptions

REPO = "google/deepsearchqa"
FILE = "DSQA-full.csv"
SHUFFLE_SEED = 42
N_TRAIN, N_TEST, N_DEV = 100, 200, 100
COLUMNS = ("problem", "answer")


def csv_path(settings: Settings, options: DeepSearchQAOptions | None = None) -> Path:
    """The CSV: in the task's option `data_dir` (deprecated alias `deepsearchqa_dir`), else
    from the hub."""
    opts = options or DeepSearchQAOptions.resolve("deepsearchqa", settings)
    if opts.data_dir:
        path = Path(opts.data_dir).expanduser() / FILE
        if not path.is_file():
            raise FileNotFoundError(f"deepsearchqa_dir={opts.data_dir} has no {FILE}")
        return path
    return hub_file(REPO, FILE, f"set -T data_dir= (the deprecated deepsearchqa_dir) to a "
                    f"folder holding {FILE}")


def load_rows(settings: Settings,
              options: DeepSearchQAOptions | None = None) -> list[dict[str, Any]]:
    """Every row, in file order, with `row_index` (its position in the file)."""
    with csv_path(settings, options).open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or any(c not in rows[0] for c in COLUMNS):
        raise ValueError(f"{FILE} must have the columns {', '.join(COLUMNS)}")
    return [{"row_index": i, "problem": r["problem"], "answer": r["answer"],
             "answer_type": r.get("answer_type") or "Single Answer",
             "problem_category": r.get("problem_category") or ""} for i, r in enumerate(rows)]


def paper_order(n: int) -> list[int]:
    """The harness's order of `n` rows: `Dataset.shuffle(seed=42)` of the `datasets` library
    (autorl_bench/benchmarks/deepsearchqa/data.py: SPLIT_SEED = 42), as row positions."""
    from datasets import Dataset

    return list(Dataset.from_dict({"i": list(range(n))}).shuffle(seed=SHUFFLE_SEED)["i"])


def split_rows(rows: list[dict[str, Any]], split: str,
               profile: str = "a2rl") -> list[dict[str, Any]]:
    if profile == "paper":
        order = paper_order(len(rows))
    else:
        order = list(range(len(rows)))
        random.Random(SHUFFLE_SEED).shuffle(order)
    n = len(rows)
    n_train, n_test, n_dev = (N_TRAIN, N_TEST, N_DEV) if n >= 900 else (n // 4,) * 3
    bounds = {"train": (0, n_train), "test": (n_train, n_train + n_test),
              "dev": (n_train + n_test, n_train + n_test + n_dev)}
    if split not in bounds:
        raise ValueError(f"DeepSearchQA splits are train, dev and test, not {split!r}")
    lo, hi = bounds[split]
    return [{"id": f"{split}-{k:03d}", **rows[i]} for k, i in enumerate(order[lo:hi])]
