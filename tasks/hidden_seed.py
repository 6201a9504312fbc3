"""Per-installation secret seeds for hidden splits.

Why a secret: the toy task's dev and test items are *generated*, so anyone who knows the seed
can regenerate them. The seed is drawn with `secrets` on first use, stored at
`$A2RL_HOME/secrets/<name>.seed` with mode 0600, and never written into a workspace or mounted
into a sandbox. Deleting the file changes the hidden splits (and the data hash in provenance).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from a2rl.settings import Settings


def seed_path(settings: Settings, name: str) -> Path:
    return settings.home_dir / "secrets" / f"{name}.seed"


def secret_seed(settings: Settings, name: str) -> int:
    """Read the named seed, creating it atomically (0600) on first use."""
    path = seed_path(settings, name)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{secrets.randbits(63)}\n")
        try:
            os.link(tmp, path)  # fails if another process created it first: keep theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return int(path.read_text().strip())


def seed_digest(settings: Settings, name: str) -> str:
    """A digest of the named seed (made on first use): it tells two installations' hidden
    splits apart without saying what the seed is."""
    text = f"a2rl-seed:{name}:{secret_seed(settings, name)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]
