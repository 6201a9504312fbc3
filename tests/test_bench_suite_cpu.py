"""bench/suite_cpu.py's reading of the kernel's accounting records (acct_v3)."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parent.parent / "bench" / "suite_cpu.py"
spec = importlib.util.spec_from_file_location("suite_cpu", PATH)
assert spec is not None and spec.loader is not None
suite_cpu = importlib.util.module_from_spec(spec)
sys.modules["suite_cpu"] = suite_cpu  # dataclasses look their module up there
spec.loader.exec_module(suite_cpu)


def record(uid: int, pid: int, comm: bytes, utime: int, stime: int, version: int = 3) -> bytes:
    return struct.pack("<BBHIIIIIIf8H16s", 0, version, 0, 0, uid, 0, pid, 1, 0, 1.0,
                       utime, stime, 0, 0, 0, 0, 0, 0, comm)


def test_records_decode_with_acct_float_times() -> None:
    assert suite_cpu.ACCT_V3.size == 64  # sizeof(struct acct_v3) in linux/acct.h
    # comp_t: 13-bit mantissa, base-8 exponent in the top 3 bits; times in 1/100 s
    big = (2 << 13) | 5000  # 5000 * 8**2 ticks = 3200 s
    data = (record(0, 10, b"a2rl", 150, 50) + record(61000, 11, b"python", big, 0)
            + record(0, 12, b"a2rl", 100, 0) + b"\0" * 10)  # a torn last record is ignored
    recs = suite_cpu.parse_records(data)
    assert [(r.pid, r.comm, r.cpu_s) for r in recs] == [
        (10, "a2rl", 2.0), (11, "python", 3200.0), (12, "a2rl", 1.0)]
    rows = suite_cpu.by_user_and_name(recs)
    assert [(comm, cpu, n) for _user, comm, cpu, n in rows] == [
        ("python", 3200.0, 1), ("a2rl", 3.0, 2)]
    assert rows[1][0] == "root"


def test_a_record_of_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match="acct_v3"):
        suite_cpu.parse_records(record(0, 1, b"x", 0, 0, version=2))
