"""The DeepSearchQA backend of the workspace's environment API (`env/deepsearchqa_env.py`).

Standard library only. The sandbox has no network: every search goes to the run's search
service, a unix socket in the run's `services/` folder (`$A2RL_SERVICES_DIR`, else
`<workspace>/../services`), one JSON line per request (the client is `env/a2rl_socket.py`, a
copy of `a2rl.jsonl_socket`), and the harness records each one. The training questions and
answers are `data/deepsearchqa/train.jsonl`; answers are scored by a lexical match to the gold
answer (every item of a set), a cheap stand-in for the grader's judge.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import a2rl_socket as jsonl  # type: ignore[import-not-found]  # env/ is on sys.path
import deepsearchqa_game as game  # type: ignore[import-not-found]

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "deepsearchqa" / "train.jsonl"
SOCKET_NAME = "search.sock"
K = 5


def socket_path() -> Path:
    folder = os.environ.get("A2RL_SERVICES_DIR") or str(HERE.parent.parent / "services")
    return Path(folder) / SOCKET_NAME


def search(query: str, k: int = K, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Ask the run's search service; raises RuntimeError when it is missing or refuses."""
    path = socket_path()
    try:
        sock = jsonl.connect(path, timeout)
    except OSError as exc:
        raise RuntimeError(f"the search service is not available at {path} ({exc}); it "
                           "runs while the harness serves this run") from exc
    with sock:
        data = jsonl.exchange(sock, {"query": query, "k": k})
    answer = jsonl.answer_of(data)
    if not answer.get("ok"):
        raise RuntimeError(f"search failed: {answer.get('error', 'no answer')}")
    return list(answer["result"]["results"])


@lru_cache(maxsize=1)
def _rows() -> dict[str, dict[str, Any]]:
    with DATA.open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {r["id"]: r for r in rows}


def train_ids() -> list[str]:
    return list(_rows())


def make_train_env(instance_id: str) -> Any:
    row = _rows()[instance_id]
    return game.QAEnv(row["problem"], search, lambda answer: game.lexical_reward(
        answer, row["answer"], row.get("answer_type", "")))
