"""Checkpoint lineage (`a2rl.store.lineage.build_lineage`) from records written by hand: the
pure part; tests/test_access_record.py drives the same through a real run."""

from __future__ import annotations

from a2rl.store.lineage import Access, Edit, JobInfo, LineageInputs, build_lineage


def _job(job_id: str, command: str, start: float, end: float, snapshot: int = 1) -> JobInfo:
    return JobInfo(id=job_id, command=command, snapshot_id=snapshot, started_at=start,
                   ended_at=end, files_recorded="complete")


def _read(job: str | None, path: str, at: float) -> Access:
    return Access(job, path, True, False, at, at, None, None)


def _wrote(job: str | None, path: str, at: float, sha: str | None, size: int = 10) -> Access:
    return Access(job, path, False, True, at, at, size, sha)


JOBS = {
    "sft": _job("sft", "python code/sft.py --out output/sft", 10, 20),
    "grpo": _job("grpo", "python code/grpo.py --init output/sft --out output/grpo", 30, 40, 2),
    "cp": _job("cp", "cp -r output/grpo output/b", 50, 51),
}
CHAIN = [
    _read("sft", "base_model/config.json", 11), _read("sft", "data/train.jsonl", 11),
    _wrote("sft", "output/sft/config.json", 19, "c"), _wrote("sft", "output/sft/w.bin", 19, "s",
                                                             1000),
    _read("grpo", "output/sft/config.json", 31), _read("grpo", "output/sft/w.bin", 31),
    _wrote("grpo", "output/grpo/config.json", 39, "c"),
    _wrote("grpo", "output/grpo/w.bin", 39, "g", 1000),
    _read("cp", "output/grpo/config.json", 50), _read("cp", "output/grpo/w.bin", 50),
    _wrote("cp", "output/b/config.json", 50.5, "c"), _wrote("cp", "output/b/w.bin", 50.5, "g",
                                                            1000),
]


def _lineage(checkpoint: str, hashes: dict[str, str], accesses: list[Access] = CHAIN,
             jobs: dict[str, JobInfo] = JOBS, **kw):  # type: ignore[no-untyped-def]
    return build_lineage(LineageInputs(checkpoint=checkpoint, file_hashes=hashes,
                                       submitted_at=100, jobs=jobs, accesses=accesses, **kw))


def _stages(lineage) -> list[tuple[str, str, str | None]]:  # type: ignore[no-untyped-def]
    return [(s.checkpoint, s.how, s.job_id) for s in lineage.stages]


def test_a_trained_chain_back_to_the_base_model() -> None:
    code = {(2, "code/grpo.py"): 'p.add_argument("--init", default="output/sft")\n'}
    lin = _lineage("output/grpo", {"config.json": "c", "w.bin": "g"},
                   code_text=lambda snap, path: code.get((snap, path)))
    assert _stages(lin) == [("output/grpo", "trained", "grpo"), ("output/sft", "trained", "sft"),
                            ("base_model", "base", None)]
    assert lin.complete and lin.note == ""
    from a2rl.store.lineage import content_sha256

    assert [(st.file_count, st.content_sha256) for st in lin.stages] == [
        (2, content_sha256({"config.json": "c", "w.bin": "g"})),
        (2, content_sha256({"config.json": "c", "w.bin": "s"})), (0, None)]
    grpo = lin.stages[0]
    assert grpo.command == JOBS["grpo"].command and grpo.snapshot_id == 2
    assert grpo.source is not None and grpo.source.checkpoint == "output/sft"
    assert grpo.source.evidence == "read"
    assert grpo.source.read == ["output/sft/config.json", "output/sft/w.bin"]
    assert grpo.source.named_by_command == ["output/sft"]  # its own output is not a source
    assert grpo.source.named_by_code == ["code/grpo.py: output/sft"]
    # the config it saved is byte for byte the SFT's: a copy of that file, not of the stage
    files = {f.path: (f.job_id, f.how, f.copied_from) for f in lin.files}
    assert files == {"config.json": ("grpo", "copied", "output/sft/config.json"),
                     "w.bin": ("grpo", "trained", None)}
    assert lin.stages[1].source.checkpoint == "base_model"  # type: ignore[union-attr]
    assert lin.stages[1].source.read == ["base_model/config.json"]  # type: ignore[union-attr]


def test_a_copy_is_shown_as_a_copy_of_what_it_read() -> None:
    lin = _lineage("output/b", {"config.json": "c", "w.bin": "g"})
    assert _stages(lin) == [("output/b", "copied", "cp"), ("output/grpo", "trained", "grpo"),
                            ("output/sft", "trained", "sft"), ("base_model", "base", None)]
    assert lin.stages[0].source.evidence == "copied"  # type: ignore[union-attr]
    # the config's content was the SFT's first, but the copy read output/grpo's
    assert {f.copied_from for f in lin.files} == {"output/grpo/config.json",
                                                  "output/grpo/w.bin"}


def test_content_not_names_decides_the_writer() -> None:
    """A rename swap: output/x/w holds what y's job wrote under output/y/w."""
    jobs = {"x": _job("x", "echo X > output/x/w", 1, 2),
            "y": _job("y", "echo Y > output/y/w", 3, 4)}
    accesses = [_wrote("x", "output/x/w", 1.5, "X"), _wrote("y", "output/y/w", 3.5, "Y")]
    lin = _lineage("output/x", {"w": "Y"}, accesses, jobs)
    assert [(f.job_id, f.how, f.written_as) for f in lin.files] == [("y", "trained",
                                                                      "output/y/w")]
    # a file whose content no job wrote is never given to the job that wrote its name last
    lin = _lineage("output/x", {"w": "Z"}, accesses, jobs)
    assert [(f.job_id, f.how) for f in lin.files] == [(None, "unattributed")]
    assert "held other content" in lin.files[0].note
    assert not lin.complete and "not tied to a job" in lin.note


def test_an_edit_after_the_last_write_is_an_edit() -> None:
    accesses = [*CHAIN, _wrote("cp", "output/b/tokenizer.json", 50.5, "t0")]
    edits = [Edit(seq=7, path="output/b/tokenizer.json", at=60)]
    lin = _lineage("output/b", {"config.json": "c", "w.bin": "g", "tokenizer.json": "t1"},
                   accesses, edits=edits)
    by = {f.path: f for f in lin.files}
    assert (by["tokenizer.json"].how, by["tokenizer.json"].tool_call) == ("edited", 7)
    assert lin.stages[0].how == "copied" and lin.stages[0].tool_calls == [7]
    # a checkpoint only edit_file wrote: an edited stage, and the chain stops there
    lin = _lineage("output/e", {"config.json": "e"}, CHAIN,
                   edits=[Edit(seq=3, path="output/e/config.json", at=5)])
    assert _stages(lin) == [("output/e", "edited", None)]
    assert "does not reach the base model" in lin.note


def test_only_named_where_the_kernel_saw_nothing_and_unattributed_writes() -> None:
    jobs = {**JOBS, "grpo": JobInfo(id="grpo", command=JOBS["grpo"].command, snapshot_id=2,
                                    started_at=30, ended_at=40,
                                    files_recorded="none: the server is not root")}
    accesses = [a for a in CHAIN if a.job_id != "grpo" or a.written]
    lin = _lineage("output/grpo", {"config.json": "c", "w.bin": "g"}, accesses, jobs)
    source = lin.stages[0].source
    assert source is not None and (source.checkpoint, source.evidence) == ("output/sft", "named")
    assert _stages(lin)[1:] == [("output/sft", "trained", "sft"), ("base_model", "base", None)]
    assert not lin.complete and "not recorded whole: grpo" in lin.note
    # a write the kernel saw but could not tie to a job is never given to one
    lin = _lineage("output/u", {"w": "u"}, [_wrote(None, "output/u/w", 5, "u")], jobs)
    assert [(f.job_id, f.how) for f in lin.files] == [(None, "unattributed")]
    assert _stages(lin) == [("output/u", "unknown", None)]
    assert ("file accesses of the run's jobs were not all recorded (none: the server is not "
            "root)") in lin.note


def test_a_job_that_reads_its_own_output_does_not_loop() -> None:
    """Training in place (`--init output/m --out output/m`): the source is the earlier job's
    output/m, as it was when read; a chain never visits a job twice."""
    jobs = {"a": _job("a", "python t.py --out output/m", 1, 2),
            "b": _job("b", "python t.py --init output/m --out output/m", 3, 4)}
    accesses = [_read("a", "base_model/config.json", 1),
                _wrote("a", "output/m/config.json", 1.5, "a"),
                _read("b", "output/m/config.json", 3), _wrote("b", "output/m/config.json", 3.5,
                                                              "b")]
    lin = _lineage("output/m", {"config.json": "b"}, accesses, jobs)
    assert _stages(lin) == [("output/m", "trained", "b"), ("output/m", "trained", "a"),
                            ("base_model", "base", None)]


def test_every_view_shows_the_chain_and_none_runs_the_agents_text(store) -> None:  # type: ignore[no-untyped-def]
    """The section as the report and the viewer take it from the store, in text, Markdown and
    HTML; a command holding terminal controls and a bidi override is shown escaped."""
    from a2rl.analysis.lineage_view import lineage_json, lineage_lines, lineage_section, stage_rows
    from a2rl.analysis.render_html import environment
    from a2rl.analysis.render_md import lineage_markdown
    from a2rl.store import Run, Submission

    hostile = "python code/grpo.py --init output/sft \x1b[2J\u202eevil"
    jobs = {**JOBS, "grpo": JobInfo(id="grpo", command=hostile, snapshot_id=2, started_at=30,
                                    ended_at=40, files_recorded="complete")}
    lin = _lineage("output/grpo", {"config.json": "c", "w.bin": "g"}, CHAIN, jobs)
    with store.session() as s:
        s.add(Run(id="r-1", workspace="/x", token_hash="t", budget_s=60, task_id="fixture",
                  backend="local", final_submission_id="s-2"))
        s.add(Submission(id="s-1", run_id="r-1", path="output/sft", lineage={}))
        s.add(Submission(id="s-2", run_id="r-1", path="output/grpo",
                         lineage=lin.model_dump(mode="json")))
    section = lineage_section(store, "r-1")
    assert section is not None and section.shown_submission_id == "s-2"
    assert [c.chain for c in section.submissions] == [
        "output/grpo (trained, grpo) <- output/sft (trained, sft) <- base_model"]
    doc = lineage_json(store, "r-1")
    assert doc["final_submission_id"] == "s-2" and set(doc["submissions"]) == {"s-2"}
    assert doc["final"]["stages"][0]["command"] == hostile  # the record keeps it as it was
    lines = lineage_lines(section.shown)
    assert lines[0] == ("output/grpo: trained by grpo (code snapshot 2): python code/grpo.py "
                        "--init output/sft \\x1b[2J\\u202eevil")
    assert lines[1].startswith("  from output/sft (the job read it; its command names "
                               "output/sft")
    assert lines[2:] == ["output/sft: trained by sft (code snapshot 1): python code/sft.py "
                         "--out output/sft", "  from base_model (the job read it)",
                         "base_model: the base model"]
    md = "\n".join(lineage_markdown(section))
    page = environment().get_template("lineage.html.jinja").render(
        lineage=section, lineage_rows=stage_rows(section.shown))
    for shown in (md, page, "\n".join(lines)):
        assert "\x1b" not in shown and "\u202e" not in shown and "\\x1b[2J" in shown
    assert "<li><code>output/grpo</code>: trained by grpo (code snapshot 2)" in page
    assert "| `output/sft` | trained by sft (code snapshot 1) |" in md
