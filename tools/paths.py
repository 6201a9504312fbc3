"""Workspace paths: everything an agent names is relative to its workspace and stays in it.

The checks here are lexical (empty, NUL, absolute, '..', length, read-only inputs); whether a
path passes through a symlink is decided by the kernel when `workspace_fs` opens it.
"""

from __future__ import annotations

from pathlib import Path

from a2rl.sandbox.workspace_fs import WorkspaceError, WorkspaceFS, show, split_path


class Workspace:
    """A run's workspace root and the inputs inside it that the agent may read but not write."""

    def __init__(self, root: Path, readonly: list[str]) -> None:
        self.root = root.resolve()
        self.readonly_names = [r.strip("/") for r in readonly]
        self.readonly = [self.root / r for r in self.readonly_names]

    def fs(self, owner: tuple[int, int] | None = None) -> WorkspaceFS:
        """Safe access below the root; what is created is chowned to `owner` when given."""
        return WorkspaceFS(self.root, owner=owner)

    def parts(self, rel: str, *, write: bool = False) -> tuple[str, ...]:
        """The components of `rel` inside the workspace; refuses what can never be used."""
        parts = split_path(rel)
        if write and parts and self.is_readonly(parts):
            raise WorkspaceError(
                f"{parts[0]}/ is a read-only input; write your own files under "
                "code/ (and checkpoints under output/)")
        return parts

    def is_readonly(self, parts: tuple[str, ...]) -> bool:
        return bool(parts) and parts[0] in self.readonly_names

    def relative(self, path: Path) -> str:
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    @staticmethod
    def show(parts: tuple[str, ...]) -> str:
        return show(parts)
