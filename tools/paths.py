"""Workspace paths: everything an agent names is relative to its workspace and stays in it."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from mcp.server.mcpserver.exceptions import ToolError


class Workspace:
    """A run's workspace root and the inputs inside it that the agent may read but not write."""

    def __init__(self, root: Path, readonly: list[str]) -> None:
        self.root = root.resolve()
        self.readonly = [(self.root / r).resolve() for r in readonly]

    def resolve(self, rel: str, *, write: bool = False) -> Path:
        """The real path of `rel`, refusing anything that leaves the workspace (symlinks too)."""
        if not isinstance(rel, str) or not rel.strip():
            raise ToolError("path is empty: give a path relative to the workspace, "
                            "e.g. 'code/train.py'")
        if "\x00" in rel:
            raise ToolError("path contains a NUL byte")
        if PurePosixPath(rel).is_absolute():
            raise ToolError(
                f"path {rel!r} is absolute: paths are relative to the workspace root "
                "(for example 'code/train.py' or 'output/ckpt')")
        target = (self.root / rel).resolve()
        if not target.is_relative_to(self.root):
            raise ToolError(
                f"path {rel!r} resolves outside the workspace (via '..' or a symlink); "
                "only files inside the workspace can be used")
        if write:
            for ro in self.readonly:
                if target == ro or target.is_relative_to(ro):
                    raise ToolError(
                        f"{self.relative(ro)}/ is a read-only input; write your own files under "
                        "code/ (and checkpoints under output/)")
        return target

    def relative(self, path: Path) -> str:
        rel = path.relative_to(self.root).as_posix()
        return rel or "."
