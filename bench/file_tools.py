"""The cost of the safe file path: read_file of a 1 MB file and edit_file, new vs the old way.

The old way (kept below as the baseline, as it was before the safe opener) resolved a path,
checked it and opened it again by name; the new one opens through `workspace_fs` (openat2
from a handle on the workspace, or per-component openat where openat2 is missing) and writes
by temporary file and rename. Both are timed in the same process on the same files, as the
tool functions' bodies (the MCP round trip around them is the same for both and is measured
by `bench/tool_latency.py`); the revision scan after an edit is left out of both.

    .venv/bin/python bench/file_tools.py [--n 200]
"""

from __future__ import annotations

import argparse
import difflib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from a2rl.sandbox.workspace_fs import WorkspaceFS
from a2rl.tools import files
from a2rl.tools.paths import Workspace


def old_resolve(root: Path, rel: str) -> Path:
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        raise ValueError(rel)
    return target


def old_read(root: Path, rel: str) -> files.ReadFileResult:
    target = old_resolve(root, rel)
    if not target.exists() or target.is_dir():
        raise ValueError(rel)
    size = target.stat().st_size
    with target.open("rb") as f:
        head = f.read(8192)
    assert not files._is_binary(head)
    with target.open("rb") as f:
        data = f.read(files.MAX_READ_BYTES)
    lines = data.decode("utf-8", errors="replace").splitlines()
    page = [f"{i:6}\t{line[:files.MAX_LINE_CHARS]}" for i, line in enumerate(lines[:400], 1)]
    return files.ReadFileResult(path=rel, content="\n".join(page), lines_returned=len(page),
                                total_lines=len(lines), next_offset=400, size=size)


def old_edit(root: Path, rel: str, old_text: str, new_text: str) -> files.EditFileResult:
    target = old_resolve(root, rel)
    if target.is_dir():
        raise ValueError(rel)
    old = target.read_bytes().decode("utf-8", errors="replace")
    new = old.replace(old_text, new_text, 1)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(new.encode())
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True), n=2))
    return files.EditFileResult(path=rel, created=False, replacements=1,
                                diff=diff[:files.MAX_DIFF_CHARS], bytes_written=len(new))


def timed(fn: Callable[[], object], n: int) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def main(n: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="a2rl-bench-files-"))
    (root / "code").mkdir()
    text = "".join(f"line {i}: {'x' * 40}\n" for i in range(20_000))  # about 1 MB
    (root / "code" / "big.txt").write_text(text)
    (root / "code" / "small.py").write_text("".join(f"v{i} = {i}\n" for i in range(200)))

    def runtime(use_openat2: bool) -> SimpleNamespace:
        ws = Workspace(root, [])
        ws.fs = lambda owner=None: WorkspaceFS(ws.root, use_openat2=use_openat2)  # type: ignore[method-assign]
        return SimpleNamespace(workspace=ws, owner=None,
                               scanner=SimpleNamespace(scan=lambda *a, **k: []))

    new_rt, fallback_rt = runtime(True), runtime(False)
    flip = [0]

    def edit_args() -> tuple[str, str]:
        flip[0] ^= 1
        return ("v100 = 100\n", "v100 = 101\n") if flip[0] else ("v100 = 101\n", "v100 = 100\n")

    def new_edit(rt: SimpleNamespace) -> None:
        old_text, new_text = edit_args()
        files._edit_file(rt, 0, "code/small.py", new_text, old_text, False)  # type: ignore[arg-type]

    rows = {
        "read_file 1 MB: old (resolve, open by name)": timed(
            lambda: old_read(root, "code/big.txt"), n),
        "read_file 1 MB: new (openat2)": timed(
            lambda: files._read_file(new_rt, "code/big.txt", 0, 400), n),  # type: ignore[arg-type]
        "read_file 1 MB: new (per-component fallback)": timed(
            lambda: files._read_file(fallback_rt, "code/big.txt", 0, 400), n),  # type: ignore[arg-type]
        "edit_file 200 lines: old (write by name)": timed(
            lambda: old_edit(root, "code/small.py", *edit_args()), n),
        "edit_file 200 lines: new (openat2, temp + rename)": timed(
            lambda: new_edit(new_rt), n),
    }
    old_r = rows["read_file 1 MB: old (resolve, open by name)"]
    old_e = rows["edit_file 200 lines: old (write by name)"]
    print(f"{'measurement':52} {'median ms':>10} {'vs old':>8}")
    for name, ms in rows.items():
        ref = old_r if name.startswith("read") else old_e
        print(f"{name:52} {ms:10.3f} {ms / ref:8.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    main(parser.parse_args().n)
