"""The toy task `arith`: deterministic data, disjoint splits, secret seed, workspace layout."""

from __future__ import annotations

import json
import stat

import pytest

from a2rl.settings import Settings
from a2rl.tasks import TaskSpec, get_task, list_tasks, prepare_workspace, secret_seed
from a2rl.tasks.arith.generate import TRAIN_SEED, make_items, normalize_answer
from a2rl.tasks.hidden_seed import seed_path


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("home"))


def test_generation_is_deterministic() -> None:
    assert make_items(7, 300, "x") == make_items(7, 300, "x")
    assert make_items(7, 300, "x") != make_items(8, 300, "x")
    item = make_items(TRAIN_SEED, 1, "train")[0]
    a, b = item["prompt"].split("+")
    assert int(item["answer"]) == int(a) + int(b)


def test_splits_are_disjoint_and_sized(settings: Settings) -> None:
    task = get_task("arith")
    train = {it["prompt"] for it in task.train_items(settings)}
    dev = task.load_split("dev", settings)
    test = task.load_split("test", settings)
    assert (len(train), len(dev), len(test)) == (6000, 200, 500)
    dev_p, test_p = {it["prompt"] for it in dev}, {it["prompt"] for it in test}
    assert len(dev_p) == 200 and len(test_p) == 500
    assert not train & dev_p and not train & test_p and not dev_p & test_p
    assert task.load_split("dev", settings) == dev  # stable for one installation
    with pytest.raises(ValueError):
        task.load_split("train", settings)  # type: ignore[arg-type]


def test_secret_seed_file(settings: Settings, tmp_path) -> None:
    seed = secret_seed(settings, "arith")
    path = seed_path(settings, "arith")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret_seed(settings, "arith") == seed
    other = Settings(home=tmp_path / "other")
    assert secret_seed(other, "arith") != seed  # a fresh installation draws its own
    task = get_task("arith")
    assert task.load_split("test", other) != task.load_split("test", settings)


def test_prepare_workspace(settings: Settings, tmp_path) -> None:
    task = get_task("arith")
    ws = tmp_path / "ws"
    prepare_workspace(task, ws, settings)
    assert sorted(p.name for p in ws.iterdir()) == [
        "TASK.md", "base_model", "code", "data", "logs", "output"]
    for empty in ("code", "output", "logs"):
        assert not any((ws / empty).iterdir())
    train = ws / "data" / "train.jsonl"
    assert stat.S_IMODE(train.stat().st_mode) == 0o444
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    assert len(rows) == 6000 and set(rows[0]) == {"id", "prompt", "answer", "messages"}
    assert (ws / "base_model" / "config.json").is_file()
    assert (ws / "base_model" / "model.safetensors").is_file()
    assert list(task.spec.readonly_paths) == ["base_model", "data"]
    # nothing hidden leaks into the workspace: no seed, no dev/test problem
    seed = str(secret_seed(settings, "arith"))
    hidden = {it["prompt"] for s in ("dev", "test") for it in task.load_split(s, settings)}
    for path in ws.rglob("*"):
        assert not path.name.endswith(".seed")
        if path.is_file() and path.suffix in (".md", ".jsonl", ".json"):
            text = path.read_text()
            assert seed not in text
    assert not hidden & {r["prompt"] for r in rows}
    prepare_workspace(task, ws, settings)  # idempotent over read-only files


def test_task_md_states_the_real_prompt(settings: Settings) -> None:
    from transformers import AutoTokenizer

    task = get_task("arith")
    tok = AutoTokenizer.from_pretrained(task.base_model_dir(settings))
    rendered = tok.apply_chat_template(task.build_prompt({"prompt": "47+85"}),
                                       add_generation_prompt=True, tokenize=False)
    assert rendered == "<s><|user|>47+85</s><|assistant|>"
    assert rendered in task.spec.description
    assert "output/" in task.spec.description and "merge_and_unload" in task.spec.description


def test_scoring() -> None:
    task = get_task("arith")
    items = [{"id": "a", "prompt": "1+2", "answer": "3"},
             {"id": "b", "prompt": "5+5", "answer": "10"},
             {"id": "c", "prompt": "9+9", "answer": "18"}]
    result = task.score_outputs(items, [" 3 ", "The answer is 10", "17"])
    assert [r.correct for r in result.items] == [True, False, False]
    assert result.score == pytest.approx(1 / 3)
    assert result.metrics["n_unparsed"] == 1
    assert normalize_answer("-0") == "0" and normalize_answer("+12") == "12"
    assert normalize_answer("1 2") is None and normalize_answer("") is None


def test_registry() -> None:
    assert "arith" in [t.spec.id for t in list_tasks()]
    spec = get_task("arith").spec
    assert isinstance(spec, TaskSpec) and spec.level == 1 and spec.default_budget == "20m"
    assert spec.sandbox_image == "a2rl-sandbox" and spec.grader.max_new_tokens >= 4
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec
    with pytest.raises(KeyError, match="unknown task"):
        get_task("nope")
