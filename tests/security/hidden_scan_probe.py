"""The scan run inside a sandbox by `test_hidden_data_scan.py` (standard library only: it runs
on the sandbox's own Python, on both backends).

Usage: python3 hidden_scan_probe.py PATTERNS REPORT. Every file the job's user can read under
`/` (but /proc, /sys, /dev and the probe's own folder) is searched for any line of PATTERNS:
plain bytes by GNU grep (`-F -r -l`, which is fast and never follows a link), then a Python
pass opens each archive or compressed file (.gz .bz2 .xz .zip .whl .tar*) and searches what it
holds. The report (JSON) lists the files with a hit, how many archives were opened, what was
skipped and the seconds taken.
"""

from __future__ import annotations

import bisect
import bz2
import gzip
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO

PROBE_DIR = "a2rl-hidden-probe"  # the folder holding the patterns: never scanned
SKIP_TOP = {"proc", "sys", "dev"}
CHUNK = 1 << 20
BATCH = 500  # files per grep
TAR = re.compile(r"\.tar(\.(gz|bz2|xz|lzma))?$")
MAX_INFLATED = 512 << 20  # bytes read out of one archive member; more is noted
ARCHIVE_TAILS = (".gz", ".tgz", ".bz2", ".xz", ".lzma", ".zip", ".whl", ".egg", ".tar")


def roots() -> list[str]:
    """The top folders, links left out: /lib -> usr/lib would scan /usr/lib twice."""
    return [p for n in sorted(os.listdir("/")) if n not in SKIP_TOP
            and not os.path.islink(p := os.path.join("/", n))]


def is_archive(name: str) -> bool:
    name = name.lower()
    return name.endswith(ARCHIVE_TAILS) or TAR.search(name) is not None


def regular_files() -> list[str]:
    """Every regular file under the roots, links not followed, the probe's folder left out."""
    found: list[str] = []
    for root in roots():
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != PROBE_DIR]
            for name in files:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    found.append(path)
    return found


def grep(patterns_file: str, paths: list[str]) -> list[str]:
    """Files holding a pattern (grep exits 1 for none, 2 when some file was unreadable or
    special: a file the job cannot read is no leak to it)."""
    p = subprocess.run(["grep", "-F", "-l", "-s", "-D", "skip", "-f", patterns_file, "--",
                        *paths], capture_output=True, env={**os.environ, "LC_ALL": "C"})
    return [line for line in p.stdout.decode(errors="replace").splitlines() if line]


def grep_hits(patterns_file: str, files: list[str]) -> list[str]:
    """The plain pass: greps over batches of files, as many at once as there are cores."""
    batches = [files[i:i + BATCH] for i in range(0, len(files), BATCH)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return [hit for hits in pool.map(lambda b: grep(patterns_file, b), batches)
                for hit in hits]


def opened(name: str, raw: IO[bytes]) -> IO[bytes]:
    """`raw` decompressed by its name's suffix (itself when not compressed)."""
    if name.endswith((".gz", ".tgz")):
        return gzip.GzipFile(fileobj=raw)
    if name.endswith(".bz2"):
        return bz2.BZ2File(raw)
    if name.endswith((".xz", ".lzma")):
        return lzma.LZMAFile(raw)
    return raw


def members(path: str) -> Iterator[tuple[str, IO[bytes]]]:
    """What an archive or compressed file holds: (name, readable) per member."""
    with open(path, "rb") as f:
        if zipfile.is_zipfile(f):
            with zipfile.ZipFile(f) as z:
                for info in z.infolist():
                    with z.open(info) as member:
                        yield f"{path}!{info.filename}", opened(info.filename, member)
            return
    name = os.path.basename(path).lower()
    if TAR.search(name) or name.endswith(".tgz"):
        with tarfile.open(path) as t:  # any compression tarfile knows
            for member in t:
                fobj = t.extractfile(member) if member.isfile() else None
                if fobj is not None:
                    yield f"{path}!{member.name}", opened(member.name, fobj)
        return
    with open(path, "rb") as f:
        yield path, opened(path, f)


def archive_hits(patterns_file: str, files: list[str],
                 notes: list[str]) -> tuple[list[str], int]:
    """The archive pass: every archive's members, decompressed, go through one grep on its
    standard input (`-b -o`: the byte offset of each hit), a newline between two members (no
    pattern holds one, so no hit spans two); offsets map back to archives."""
    archives = [p for p in files if is_archive(os.path.basename(p))]
    proc = subprocess.Popen(["grep", "-a", "-b", "-o", "-F", "-f", patterns_file],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, "LC_ALL": "C"})
    assert proc.stdin is not None and proc.stdout is not None
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore
    reader.start()
    starts: list[int] = []
    owners: list[str] = []
    offset, n_opened = 0, 0
    for path in archives:
        try:
            for _name, stream in members(path):
                starts.append(offset)
                owners.append(path)
                total = 0
                while chunk := stream.read(CHUNK):
                    proc.stdin.write(chunk)
                    offset += len(chunk)
                    total += len(chunk)
                    if total > MAX_INFLATED:
                        notes.append(f"{_name}: read the first {MAX_INFLATED} bytes only")
                        break
                proc.stdin.write(b"\n")
                offset += 1
            n_opened += 1
        except PermissionError:
            continue
        except (OSError, EOFError, ValueError, zipfile.BadZipFile, tarfile.TarError,
                lzma.LZMAError, NotImplementedError, RuntimeError) as exc:
            notes.append(f"{path}: not opened ({type(exc).__name__})")
    proc.stdin.close()
    reader.join()
    proc.wait()
    hits: dict[str, None] = {}
    for line in b"".join(out).splitlines():
        at = int(line.split(b":", 1)[0])
        hits[owners[bisect.bisect_right(starts, at) - 1]] = None
    return list(hits), n_opened


def main(patterns_file: str, report: str) -> None:
    start = time.monotonic()
    notes: list[str] = []
    files = regular_files()
    grep = grep_hits(patterns_file, files)
    grep_s = time.monotonic() - start
    archives, n_archives = archive_hits(patterns_file, files, notes)
    with open(report, "w") as f:
        json.dump({"grep_hits": grep, "archive_hits": archives, "files": len(files),
                   "archives_opened": n_archives, "notes": notes, "grep_s": round(grep_s, 1),
                   "seconds": round(time.monotonic() - start, 1), "uid": os.getuid()}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
