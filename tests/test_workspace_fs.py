"""The safe opener: openat2 and its per-component fallback refuse the same things."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from a2rl.sandbox.workspace_fs import (
    HAVE_OPENAT2,
    MAX_WALK_DEPTH,
    WorkspaceError,
    WorkspaceFS,
    split_path,
)

from .conftest import require


@pytest.fixture(params=["openat2", "components"])
def fs(request: pytest.FixtureRequest, tmp_path: Path) -> WorkspaceFS:
    if request.param == "openat2":
        require(HAVE_OPENAT2, "this kernel has no openat2 (Linux 5.6+)")
    root = tmp_path / "ws"
    (root / "code").mkdir(parents=True)
    (root / "code" / "a.txt").write_text("hello\n")
    return WorkspaceFS(root, use_openat2=request.param == "openat2")


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host folder outside the workspace, with a secret."""
    d = tmp_path / "host"
    d.mkdir()
    (d / "secret.txt").write_text("CANARY\n")
    return d


def test_split_path_is_lexical_and_refuses_escapes() -> None:
    assert split_path("code/./x/../a.txt") == ("code", "a.txt")
    assert split_path(".") == ()
    for bad, why in [("../x", "outside"), ("code/../../x", "outside"), ("/etc", "absolute"),
                     ("", "empty"), ("a\x00b", "NUL"), ("x" * 5000, "too long"),
                     ("code/" + "y" * 300, "too long"), ("\ud800", "UTF-8")]:
        with pytest.raises(WorkspaceError, match=why):
            split_path(bad)


def test_reads_regular_files_only(fs: WorkspaceFS) -> None:
    data, st = fs.read(("code", "a.txt"), 3)
    assert data == b"hel" and st.st_size == 6
    with pytest.raises(WorkspaceError, match="is a directory"):
        fs.read(("code",), 10)
    with pytest.raises(WorkspaceError, match="does not exist"):
        fs.read(("code", "nope"), 10)


def test_symlinks_are_never_followed(fs: WorkspaceFS, host: Path) -> None:
    os.symlink(host / "secret.txt", fs.root / "code" / "file_link")
    os.symlink(host, fs.root / "code" / "dir_link")
    os.symlink("a.txt", fs.root / "code" / "inside_link")  # even one that stays inside
    for parts in [("code", "file_link"), ("code", "dir_link", "secret.txt"),
                  ("code", "inside_link")]:
        with pytest.raises(WorkspaceError, match="symlink"):
            fs.read(parts, 100)
    with pytest.raises(WorkspaceError, match="symlink"):
        list(fs.walk(("code", "dir_link")))
    with pytest.raises(WorkspaceError, match="symlink"):
        fs.write(("code", "dir_link", "new.txt"), b"x")
    assert sorted(p.name for p in host.iterdir()) == ["secret.txt"]


def test_fifo_socket_and_device_are_refused_at_once(fs: WorkspaceFS) -> None:
    os.mkfifo(fs.root / "code" / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(fs.root / "code" / "sock"))
    try:
        started = time.monotonic()
        with pytest.raises(WorkspaceError, match="FIFO, not a regular file"):
            fs.read(("code", "fifo"), 100)
        with pytest.raises(WorkspaceError, match="socket"):
            fs.read(("code", "sock"), 100)
        assert time.monotonic() - started < 1
    finally:
        sock.close()
    os.symlink("/dev/zero", fs.root / "code" / "zero")
    with pytest.raises(WorkspaceError, match="symlink"):
        fs.read(("code", "zero"), 100)


def test_write_replaces_links_instead_of_writing_through(fs: WorkspaceFS, host: Path) -> None:
    os.symlink(host / "secret.txt", fs.root / "code" / "link")
    os.link(host / "secret.txt", fs.root / "code" / "hard")
    fs.write(("code", "link"), b"new\n")
    fs.write(("code", "hard"), b"new\n")
    assert (host / "secret.txt").read_text() == "CANARY\n"
    assert (fs.root / "code" / "hard").read_text() == "new\n"
    assert not (fs.root / "code" / "link").is_symlink()
    created = fs.write(("code", "x", "y", "z.txt"), b"z", mode=0o755)
    assert created == [("code", "x"), ("code", "x", "y")]
    assert os.stat(fs.root / "code/x/y/z.txt").st_mode & 0o777 == 0o755 & ~_umask()
    assert not [p for p in (fs.root / "code").iterdir() if ".a2rl-" in p.name]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_walk_is_iterative_and_capped(fs: WorkspaceFS) -> None:
    deep = fs.root / "code"
    os.chdir(deep)  # build 1,500 levels without paths longer than PATH_MAX
    try:
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(fs.root.parent)
    entries = list(fs.walk(()))
    depths = {len(e.parts) for e in entries}
    assert max(depths) == MAX_WALK_DEPTH
    assert ("code", "a.txt") in {e.parts for e in entries}
    subprocess.run(["rm", "-rf", str(deep / "d")], check=True)  # shutil.rmtree recurses


def test_a_folder_flipped_to_a_symlink_never_leaks(fs: WorkspaceFS, host: Path) -> None:
    """The race the kernel must win: a folder swapped with a symlink to a host folder
    (renameat2 RENAME_EXCHANGE, atomic) while we read, list and write through it."""
    real = fs.root / "code" / "flip"
    real.mkdir()
    (real / "secret.txt").write_text("safe\n")
    os.symlink(host, fs.root / "code" / "other")
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()
    flips = 0

    def flipper() -> None:
        nonlocal flips
        a, b = str(real).encode(), str(fs.root / "code" / "other").encode()
        while not stop.is_set():
            assert libc.renameat2(-100, a, -100, b, 2) == 0  # AT_FDCWD, RENAME_EXCHANGE
            flips += 1

    t = threading.Thread(target=flipper)
    t.start()
    try:
        for _ in range(300):
            try:
                data, _ = fs.read(("code", "flip", "secret.txt"), 100)
                assert data == b"safe\n"
            except WorkspaceError as exc:
                assert "symlink" in str(exc)
            try:
                names = {e.parts[-1] for e in fs.walk(("code", "flip"))}
                assert names <= {"secret.txt", "new.txt"}
            except WorkspaceError as exc:
                assert "symlink" in str(exc)
            try:
                fs.write(("code", "flip", "new.txt"), b"x")
            except WorkspaceError as exc:
                assert "symlink" in str(exc)
    finally:
        stop.set()
        t.join()
    assert flips > 300
    assert sorted(p.name for p in host.iterdir()) == ["secret.txt"]
    assert (host / "secret.txt").read_text() == "CANARY\n"
