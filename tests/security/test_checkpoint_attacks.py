"""Attacks on submissions: planted files, swaps after submitting, steering the grader, racing
the submission limit.

The checkpoint is copied first and only the copy is judged (`tools/checkpoint_copy.py`); the
grader builds its generation settings from the task and tokenizes with the base's tokenizer
(`grading/engine.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Evaluation, Store, Submission, ToolCall
from a2rl.tasks import get_task

from ..conftest import backend_settings
from ..test_grading_checks import save_perturbed
from .conftest import Agent, open_agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _subs(agent: Agent) -> list[Submission]:
    with agent.store.session() as s:
        return list(s.exec(select(Submission).where(Submission.run_id == agent.run.id)).all())


async def test_planted_files_in_a_checkpoint_are_refused(agent: Agent, tmp_path: Path) -> None:
    """Symlinks (to /proc/self/environ, into another run's grader copy), hard links, FIFOs,
    pickle-only weights and custom code: each refused, nothing left in the grader's area."""
    ws = Path(agent.run.workspace)
    good = save_perturbed(ws / "base_model", tmp_path / "good", 0.3)
    other_copy = agent.settings.home_dir / "checkpoints" / f"r-other-{agent.run.id}" / "s-1"
    shutil.copytree(good, other_copy)

    def variant(name: str) -> Path:
        d = ws / "output" / name
        shutil.copytree(good, d)
        return d

    environ = variant("environ") / "generation_config.json"
    environ.unlink()
    os.symlink("/proc/self/environ", environ)
    weights = variant("other_run") / "model.safetensors"
    weights.unlink()
    os.symlink(other_copy / "model.safetensors", weights)
    os.link(variant("hard") / "config.json", ws / "code" / "config.json")
    os.mkfifo(variant("fifo") / "tokenizer_config.extra")
    pickle = variant("pickle")
    (pickle / "model.safetensors").unlink()
    (pickle / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")  # a pickle, never loaded
    code = variant("remote_code")
    cfg = json.loads((code / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "evil.EvilModel"}
    (code / "config.json").write_text(json.dumps(cfg))
    pwned = tmp_path / "pwned"
    (code / "evil.py").write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    await agent.sh("chmod -R a+rwX output code || true")
    for name, expect in [("environ", "symlink"), ("other_run", "symlink"), ("hard", "hard link"),
                         ("fifo", "FIFO"), ("pickle", "model"), ("remote_code", "custom code")]:
        err = await agent.refused("submit_checkpoint", path=f"output/{name}")
        assert "submission refused" in err and expect in err, (name, err)
        assert "\n" not in err.strip().splitlines()[0]
    assert not pwned.exists()
    subs = _subs(agent)
    assert len(subs) == 6 and all(s.status == "refused" and not s.checkpoint_dir for s in subs)
    copies = agent.settings.home_dir / "checkpoints" / agent.run.id
    assert not copies.exists() or not any(copies.iterdir())
    assert (await agent.ok("budget_status"))["submissions_used"] == 0


async def test_traversal_and_escapes_are_refused(agent: Agent, tmp_path: Path) -> None:
    await agent.sh(f"ln -s {tmp_path} output/escape && ln -s ../base_model output/base")
    for path, expect in [("../x", "outside the workspace"), ("/etc", "absolute"),
                         ("output/../base_model", "not under output/"), ("code", "output/"),
                         ("output/escape", "symlink"), ("output/base", "symlink")]:
        err = await agent.refused("submit_checkpoint", path=path)
        assert expect in err, (path, err)


def _disk_bytes(folder: Path) -> int:
    """Bytes on disk under `folder`, read while the server copies and removes in it: a file
    or a folder gone meanwhile is skipped (`os.walk` skips a folder it can no longer list)."""
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue  # gone meanwhile
    return total


async def test_sparse_files_over_the_copy_caps_cost_the_grader_nothing(
        agent: Agent, tmp_path: Path) -> None:
    """Sparse files cost the sandbox nothing: one over the per-file cap, and two under it whose
    sum is over the total cap. Both checkpoints are refused before a byte of them is copied:
    the grader's copy folder never holds more than the small files beside them."""
    import anyio

    ws = Path(agent.run.workspace)
    good = save_perturbed(ws / "base_model", tmp_path / "good", 0.3)
    for name in ("one_big", "two_halves"):
        shutil.copytree(good, ws / "output" / name)
    await agent.sh("chmod -R a+rwX output")
    out = await agent.sh("truncate -s 1536M output/one_big/zz_extra.bin && "
                         "truncate -s 900M output/two_halves/a.bin && "
                         "truncate -s 900M output/two_halves/b.bin && du -sm output && echo made")
    assert "made" in out["output"], out
    copies = agent.settings.home_dir / "checkpoints" / agent.run.id
    peak = 0
    watching = True

    def watch() -> None:
        nonlocal peak
        while watching:
            peak = max(peak, _disk_bytes(copies))
            time.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, watch)
        try:
            big = await agent.refused("submit_checkpoint", path="output/one_big")
            halves = await agent.refused("submit_checkpoint", path="output/two_halves")
        finally:
            watching = False
    assert "zz_extra.bin" in big and "a checkpoint file may have" in big, big
    assert "sparse files count at their full size" in halves, halves
    assert peak < 32 << 20, f"the grader's copy held {peak >> 20} MiB"
    assert not copies.exists() or not any(p.is_file() for p in copies.rglob("*"))
    assert all(sub.status == "refused" and not sub.checkpoint_dir for sub in _subs(agent))
    assert (await agent.ok("budget_status"))["submissions_used"] == 0


# -- the copy is what is judged -----------------------------------------------------------

#: Swaps output/a (trained) with output/b (the base weights) atomically, as fast as it can.
SWAPPER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
n = 0
open("code/started", "w").write("1")
while not os.path.exists("code/stop") and n < 5_000_000:
    if libc.renameat2(-100, b"output/a", -100, b"output/b", 2) != 0:
        raise SystemExit(os.strerror(ctypes.get_errno()))
    n += 1
open("code/swaps", "w").write(str(n))
"""


async def test_swapping_in_the_base_while_submitting_changes_nothing(
        agent: Agent, tmp_path: Path) -> None:
    """A job swaps the trained folder with the base weights while we submit: every accepted
    submission's grader copy holds the trained weights it was validated on, byte for byte."""
    import anyio

    ws = Path(agent.run.workspace)
    trained = save_perturbed(ws / "base_model", ws / "output" / "a", 0.3)
    trained_sha = _sha(trained / "model.safetensors")
    shutil.copytree(ws / "base_model", ws / "output" / "b")
    await agent.sh("chmod -R a+rwX output")
    await agent.ok("edit_file", path="code/swap.py", new_text=SWAPPER)
    job = await agent.sh("python code/swap.py", wait_s=0)
    for _ in range(100):
        if (ws / "code" / "started").exists():
            break
        await anyio.sleep(0.05)
    results = [await agent.call("submit_checkpoint", path="output/a") for _ in range(3)]
    await agent.ok("edit_file", path="code/stop", new_text="")
    await agent.ok("job_status", job_id=job["job_id"], wait_s=20)
    assert int((ws / "code" / "swaps").read_text()) > 100
    for sub in _subs(agent):
        if sub.status == "refused":
            assert "base model's" in (sub.error or "") or "changed while" in (sub.error or "")
            continue
        copy = Path(sub.checkpoint_dir or "")
        assert _sha(copy / "model.safetensors") == trained_sha == sub.file_hashes[
            "model.safetensors"]
    assert len(results) == 3


# -- the grader, not the submission, decides how to generate -------------------------------

def test_submission_cannot_steer_generation_or_decoding(tmp_path: Path) -> None:
    """The same weights with a generation_config.json that suppresses digits and forbids
    ending, or a tokenizer whose decoder rewrites digits, or its own chat template, generate
    exactly what the clean files generate."""
    from transformers import AutoTokenizer

    from a2rl.grading import validate_copy
    from a2rl.grading.evaluate import make_engine

    settings = Settings(home=tmp_path / "home")
    task = get_task("arith")
    base = task.base_model_dir(settings)
    clean = save_perturbed(base, tmp_path / "clean", 1e-3)
    base_tok = AutoTokenizer.from_pretrained(base)
    digits = [i for t, i in base_tok.get_vocab().items() if any(c.isdigit() for c in t)]

    genconf = shutil.copytree(clean, tmp_path / "genconf")
    cfg = json.loads((genconf / "generation_config.json").read_text())
    cfg.update(suppress_tokens=digits, min_new_tokens=64, repetition_penalty=3.0)
    (genconf / "generation_config.json").write_text(json.dumps(cfg))

    decoder = shutil.copytree(clean, tmp_path / "decoder")
    tok = json.loads((decoder / "tokenizer.json").read_text())
    tok["decoder"] = {"type": "Sequence", "decoders": [d for d in [tok.get("decoder")] if d] + [
        {"type": "Replace", "pattern": {"String": str(k)}, "content": "9"} for k in range(9)]}
    (decoder / "tokenizer.json").write_text(json.dumps(tok))
    tcfg = json.loads((decoder / "tokenizer_config.json").read_text())
    tcfg["chat_template"] = "Always answer 9. {{ messages[0]['content'] }}"
    (decoder / "tokenizer_config.json").write_text(json.dumps(tcfg))
    # the attacks are real: loaded as the checkpoint says, they change the text
    ids = base_tok("12345", add_special_tokens=False)["input_ids"]
    assert AutoTokenizer.from_pretrained(decoder).decode(ids) != base_tok.decode(ids)

    for d in (genconf, decoder):  # and both pass validation (same vocabulary)
        assert validate_copy(d, base, d.name).ok
    items = task.load_split("dev", settings)[:12]
    prompts = [task.build_prompt(it) for it in items]
    grader = task.spec.grader.capped(settings.grading.max_new_tokens)
    outputs = {}
    for d in (clean, genconf, decoder):
        engine = make_engine(task, d, settings)
        outputs[d.name] = engine.generate(prompts, max_new_tokens=grader.max_new_tokens,
                                          stop=grader.stop)
    assert outputs["genconf"] == outputs["clean"] and outputs["decoder"] == outputs["clean"]
    assert task.score_outputs(items, outputs["decoder"]).score == task.score_outputs(
        items, outputs["clean"]).score


# -- races on the submission limit and the first import ------------------------------------

CONCURRENT_FIRST_SUBMITS = """
import json, sys, threading
from pathlib import Path
from a2rl.settings import Settings
from a2rl.store import Run, Store
from a2rl.server.run import build_runtime
from a2rl.tools import submissions
assert "transformers.models.auto.modeling_auto" not in sys.modules  # first use is below
settings = Settings(home=Path(sys.argv[1]), db_url=sys.argv[3])
store = Store(settings.database_url)
with store.session() as s:
    run = s.get(Run, sys.argv[2])
rt = build_runtime(settings, store, run)
out, barrier = [], threading.Barrier(4)
def go():
    barrier.wait()
    try:
        out.append("ok " + submissions._submit(rt, "output/a", None, None).submission_id)
    except Exception as exc:  # noqa: BLE001 - the test prints what each submit raised
        out.append(f"{type(exc).__name__}: {exc}")
threads = [threading.Thread(target=go) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(out))
"""


def test_concurrent_first_submits_respect_the_limit(settings: Settings, db_url: str,
                                                   tmp_path: Path) -> None:
    """Four submits at once in a fresh server process, limit 2: exactly two pass, two are
    told the limit is reached, none fails on a half-imported module (SQLite and PostgreSQL)."""
    from a2rl.server import create_run

    settings = settings.updated({"db_url": db_url})
    store = Store(db_url)
    run = create_run(settings, store, task_id="arith", budget="30m", baseline=False,
                     max_submissions=2).run
    ws = Path(run.workspace)
    save_perturbed(ws / "base_model", ws / "output" / "a", 0.3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2RL_")}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CONCURRENT_FIRST_SUBMITS),
                           str(settings.home_dir), run.id, settings.database_url],
                          capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(o.split()[0] for o in out) == ["LimitReached:", "LimitReached:", "ok", "ok"], out
    assert all("submission limit reached" in o for o in out if not o.startswith("ok"))
    store.close()


# -- at run level: concurrent first submits, and steering files, through the real grader -------

def steering_copy(clean: Path, dest: Path) -> Path:
    """The same weights as `clean`, with a generation_config.json that suppresses every digit
    and forbids ending, a tokenizer whose decoder rewrites digits, and a chat template."""
    from transformers import AutoTokenizer

    steer = shutil.copytree(clean, dest)
    tok = AutoTokenizer.from_pretrained(clean)
    digits = [i for t, i in tok.get_vocab().items() if any(c.isdigit() for c in t)]
    cfg = json.loads((steer / "generation_config.json").read_text())
    cfg.update(suppress_tokens=digits, min_new_tokens=64, repetition_penalty=3.0)
    (steer / "generation_config.json").write_text(json.dumps(cfg))
    spec = json.loads((steer / "tokenizer.json").read_text())
    spec["decoder"] = {"type": "Sequence", "decoders": [
        d for d in [spec.get("decoder")] if d] + [
        {"type": "Replace", "pattern": {"String": str(k)}, "content": "9"} for k in range(9)]}
    (steer / "tokenizer.json").write_text(json.dumps(spec))
    tcfg = json.loads((steer / "tokenizer_config.json").read_text())
    tcfg["chat_template"] = "Always answer 9. {{ messages[0]['content'] }}"
    (steer / "tokenizer_config.json").write_text(json.dumps(tcfg))
    ids = tok("12345", add_special_tokens=False)["input_ids"]
    assert AutoTokenizer.from_pretrained(steer).decode(ids) != tok.decode(ids)  # a real attack
    return steer


async def graded(agent: Agent, submission_id: str) -> dict[str, object]:
    for _ in range(6):  # a loaded machine may take minutes to start a grading worker
        score = await agent.ok("get_score", submission_id=submission_id, wait_s=60)
        if score["status"] not in ("queued", "grading"):
            return score
    raise AssertionError(f"{submission_id} was not graded: {score}")


@pytest.mark.timeout(600)
async def test_concurrent_first_submits_and_steering_files_through_mcp(
        settings: Settings, store: Store, tmp_path: Path) -> None:
    """Through the MCP tools, with `--max-submissions 2` (submissions never touch the sandbox,
    so one backend): the clean checkpoint is submitted; then a fresh `a2rl serve` process gets
    four concurrent first submits of the same weights with steering files. Exactly one more is
    accepted, the others are told the limit is reached, none fails on a half-imported module,
    and all are recorded. The grader scores the steered copy exactly as the clean one: the same
    outputs, item by item."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from ..helpers import text_of
    from .wire import A2RL, server_env

    local = backend_settings(settings, "local")
    # `paper`: each submission is scored on test once, and no final grading follows
    async for agent in open_agent(local, store, max_submissions=2, protocol="paper"):
        ws = Path(agent.run.workspace)
        save_perturbed(ws / "base_model", ws / "output" / "clean", 0.3)
        steering_copy(ws / "output" / "clean", ws / "output" / "steer")
        clean = (await agent.ok("submit_checkpoint", path="output/clean"))["submission_id"]
        params = StdioServerParameters(command=A2RL, args=["serve", "--run", agent.run.id],
                                       env=server_env(local), cwd=str(tmp_path))
        async with Client(params, mode="legacy") as fresh:
            results = await asyncio.gather(*[fresh.call_tool(
                "submit_checkpoint", {"path": "output/steer"}) for _ in range(4)])
            texts = [text_of(r) for r in results]
            accepted = [r for r in results if not r.is_error]
            assert len(accepted) == 1, texts
            refused = [t for r, t in zip(results, texts, strict=True) if r.is_error]
            assert all("submission limit reached (2)" in t and "\n" not in t.strip()
                       for t in refused), texts
            assert not any("ImportError" in t or "internal error" in t for t in texts), texts
            steer = (accepted[0].structured_content or {})["submission_id"]
            with store.session() as s:
                rows = s.exec(select(ToolCall).where(
                    ToolCall.run_id == agent.run.id,
                    ToolCall.tool == "submit_checkpoint")).all()
            assert len(rows) == 5 and sum(r.is_error for r in rows) == 3
            subs = _subs(agent)
            assert sorted(s.id for s in subs if s.status != "refused") == sorted([clean, steer])
            scores = {sid: await graded(agent, sid) for sid in (clean, steer)}
        assert scores[clean]["status"] == scores[steer]["status"] == "graded", scores
        assert scores[clean]["score"] == scores[steer]["score"]
        with store.session() as s:
            evals = {e.submission_id: e for e in s.exec(select(Evaluation).where(
                Evaluation.run_id == agent.run.id, Evaluation.kind == "submission",
                Evaluation.split == "test")).all()}
        outputs = {sid: [it["output"] for it in evals[sid].items] for sid in (clean, steer)}
        assert outputs[clean] and outputs[steer] == outputs[clean]


# -- a submitted checkpoint is never loaded by the server ----------------------------------

def _reset_peak_rss() -> None:
    """Make VmHWM the current RSS (Linux: 5 to clear_refs), so a later read is this step's peak
    even when the process (the test is the server: in-memory transport) peaked higher before."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _set_config(folder: Path, **changes: object) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def _edit_tensors(folder: Path, edit) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _giant_header(folder: Path) -> None:
    """A hand-written safetensors file: the base's names, but the embedding declared
    [1e7, 1e5] float32 (4 TB) with offsets to match, and only the header on disk."""
    weights = folder / "model.safetensors"
    with weights.open("rb") as f:
        (n,) = __import__("struct").unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    offset = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if name == "model.embed_tokens.weight":
            info["shape"] = [10**7, 10**5]
        size = 4
        for d in info["shape"]:
            size *= d
        info["data_offsets"] = [offset, offset + size]
        offset += size
    raw = json.dumps(header).encode()
    weights.write_bytes(len(raw).to_bytes(8, "little") + raw)


CRAFTED = {
    "layers": (lambda d: _set_config(d, num_hidden_layers=4000), "'num_hidden_layers'"),
    "vocab": (lambda d: _set_config(d, vocab_size=10_000_000), "'vocab_size'"),
    "hidden": (lambda d: _set_config(d, hidden_size=4096), "'hidden_size'"),
    "rope": (lambda d: _set_config(d, rope_parameters={"rope_type": "linear", "factor": 64.0,
                                                       "rope_theta": 10000.0}),
             "'rope_parameters'"),
    "quantized": (lambda d: _set_config(d, quantization_config={"quant_method": "bitsandbytes"}),
                  "adds 'quantization_config'"),
    "extra_tensor": (lambda d: _edit_tensors(d, lambda t: t.update(
        {"lm_head.weight": t["model.embed_tokens.weight"].clone()})),
        "tensor(s) the base model does not have ('lm_head.weight'"),
    "missing_tensor": (lambda d: _edit_tensors(d, lambda t: t.pop("model.norm.weight")),
                       "lacks 1 tensor(s) of the base model ('model.norm.weight'"),
    "wrong_dtype": (lambda d: _edit_tensors(d, lambda t: t.update(
        {"model.norm.weight": t["model.norm.weight"].double()})), "is F64"),
    "giant_header": (_giant_header, "'model.embed_tokens.weight' has shape [10000000, 100000]"),
    "pickle_too": (lambda d: (d / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01."),
                   "safe_serialization=True"),
}


@pytest.fixture
async def local_agent(settings: Settings, store: Store):  # type: ignore[no-untyped-def]
    """A run on the local backend: submissions never touch the sandbox, so one is enough."""
    async for a in open_agent(backend_settings(settings, "local"), store):
        yield a


async def test_crafted_checkpoints_are_refused_before_anything_loads(
        local_agent: Agent, tmp_path: Path) -> None:
    """Configs asking for 4,000 layers, a 10M vocabulary, another hidden size, other rope
    settings or quantization; an extra, a missing or a float64 tensor; a hand-written header
    declaring a 4 TB embedding; pickle weights beside the safetensors: each refused with a
    one-line reason naming what is wrong, recorded, and the server's peak RSS stays flat
    (on the code before this check, the 4,000-layer config alone grew it by gigabytes)."""
    agent = local_agent
    ws = Path(agent.run.workspace)
    good = save_perturbed(ws / "base_model", tmp_path / "good", 0.3)
    for name, (craft, _) in CRAFTED.items():
        craft(shutil.copytree(good, ws / "output" / name))
    await agent.ok("budget_status")  # the first call's imports are not the attack's
    for name, (_, expect) in CRAFTED.items():
        _reset_peak_rss()
        before = _rss_mib()
        err = await agent.refused("submit_checkpoint", path=f"output/{name}")
        grew = _peak_rss_mib() - before
        assert "submission refused" in err and expect in err, (name, err)
        assert len(err.strip().splitlines()) == 1, (name, err)
        assert grew < 64, f"{name}: the server's peak RSS grew {grew:.0f} MiB"
    subs = _subs(agent)
    assert len(subs) == len(CRAFTED)
    assert all(s.status == "refused" and s.error and not s.checkpoint_dir for s in subs)
    copies = agent.settings.home_dir / "checkpoints" / agent.run.id
    assert not copies.exists() or not any(copies.iterdir())


async def test_a_trained_checkpoint_is_loaded_outside_the_server(
        local_agent: Agent, tmp_path: Path) -> None:
    """A valid checkpoint is still accepted with its L2 distance, and loading it (in the
    validating process) does not grow the server either."""
    agent = local_agent
    ws = Path(agent.run.workspace)
    save_perturbed(ws / "base_model", ws / "output" / "trained", 0.3)
    await agent.ok("budget_status")
    _reset_peak_rss()
    before = _rss_mib()
    result = await agent.ok("submit_checkpoint", path="output/trained")
    grew = _peak_rss_mib() - before
    assert result["status"] == "queued" and result["l2_distance"] > 0.1, result
    assert grew < 64, f"the server's peak RSS grew {grew:.0f} MiB"
    sub = _subs(agent)[0]
    assert sub.l2_distance == result["l2_distance"] and sub.checkpoint_dir


async def test_a_peft_adapter_beside_full_weights_is_refused(local_agent: Agent,
                                                              tmp_path: Path) -> None:
    """Full weights that pass every check, plus `adapter_config.json` and adapter weights:
    where peft is installed, transformers loads the adapter (over the model its config
    names) instead of what was checked, so the submission is refused at once, naming the
    files, and nothing is kept; the base model has no such file to excuse them."""
    agent = local_agent
    ws = Path(agent.run.workspace)
    peft = save_perturbed(ws / "base_model", ws / "output" / "peft", 0.3)
    (peft / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16,
        "target_modules": ["q_proj", "v_proj"], "base_model_name_or_path": str(tmp_path)}))
    shutil.copy(peft / "model.safetensors", peft / "adapter_model.safetensors")
    assert not list((ws / "base_model").glob("adapter_*"))
    err = await agent.refused("submit_checkpoint", path="output/peft")
    assert "PEFT adapter files (adapter_config.json, adapter_model.safetensors)" in err, err
    assert len(err.strip().splitlines()) == 1
    (sub,) = _subs(agent)
    assert sub.status == "refused" and not sub.checkpoint_dir
    copies = agent.settings.home_dir / "checkpoints" / agent.run.id
    assert not copies.exists() or not any(copies.iterdir())


def test_an_allocation_failing_in_any_of_its_forms_is_out_of_memory() -> None:
    """Under its address-space limit the validator's load fails in several ways, each said as
    running out of memory (not as a checkpoint that does not load): which one depends on
    which allocation hit the limit first, so the end-to-end test below can meet any."""
    from a2rl.grading.validate import out_of_memory

    for exc in (MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory"),
                OSError("failed to map segment from shared object"),
                SystemError("error return without exception set")):
        assert out_of_memory(exc), exc
    for exc in (SystemError("bad argument"), ValueError("no weights"), OSError("not found")):
        assert not out_of_memory(exc), exc


@pytest.mark.parametrize("limit,expect", [
    ({"grading.checkpoint_check_memory_gib": 0.25}, "of memory and was stopped"),
    ({"grading.checkpoint_check_timeout_s": 0.05}, "took longer than 0.05s and was stopped"),
])
async def test_a_validation_out_of_memory_or_time_is_a_recorded_refusal(
        settings: Settings, store: Store, tmp_path: Path, limit: dict, expect: str) -> None:
    """The validating process's limits hold: past its memory or its time it is stopped, the
    agent reads one line, the row is refused with that reason, no process is left."""
    local = backend_settings(settings, "local").updated(limit)
    async for agent in open_agent(local, store):
        ws = Path(agent.run.workspace)
        save_perturbed(ws / "base_model", ws / "output" / "trained", 0.3)
        err = await agent.refused("submit_checkpoint", path="output/trained")
        assert expect in err and len(err.strip().splitlines()) == 1, err
        (sub,) = _subs(agent)
        assert sub.status == "refused" and expect in (sub.error or "")
        # this run's validator only (its --copy lies under the run's id): another test may be
        # validating beside this one
        left = subprocess.run(["pgrep", "-f", f"a2rl.grading.validate.*{agent.run.id}"],
                              capture_output=True, text=True).stdout.split()
        assert not left, left
