"""A size-limited filesystem for a run's workspace: the kernel's disk wall.

The supervisor's watch (`--disk-limit`) measures the workspace every few seconds and ends the
job that wrote past the limit, with a message the agent reads; but between two looks a job can
write at disk speed, and `fallocate` reserves gigabytes at once. So when the server runs as root
with loop devices (the usual GPU machine), the workspace is its own ext4 filesystem: a sparse
image under the run's folder, loop-mounted on `workspace/`. A write past its size fails with
ENOSPC whatever the job does, on both backends (bubblewrap and containers bind the mounted
folder). The image holds the limit plus the task's inputs (base model, data) plus room for the
filesystem itself, so the watch still speaks first and the kernel holds the line behind it.

The mount lives as long as the run: `finish_run` detaches it (`detach`: the mount and its loop
device go), so a finished run holds no kernel resource and a home removed with `rm -rf` leaves
nothing mounted. What reads a finished run (`a2rl show`, `report`, `view`, `export`) reads the
store, never the workspace; its files stay in `workspace.img` (`mount -o loop,ro
<run>/workspace.img <folder>` to look again). A run that never finished (the server crashed) and
whose image was then deleted leaves a loop device on a deleted file: `detach_orphans`, run before
each new volume is made and by `a2rl gc`, unmounts and frees those. Without root or loop devices
the watch alone remains (`sandbox.disk_volume` in `a2rl config show`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

IMAGE_NAME = "workspace.img"
# Room for ext4's own metadata (journal, inode tables, reserved groups) above the payload.
OVERHEAD_BYTES = 64 << 20
OVERHEAD_FRACTION = 0.03
BYTES_PER_INODE = 1 << 20  # few, large inode tables: nothing to zero in the background


class VolumeError(RuntimeError):
    """The volume could not be made or mounted (one line, for the user)."""


def unavailable_reason() -> str | None:
    """Why a volume cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "the server is not root (mounting needs it)"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control is missing)"
    return None


def image_size(limit_bytes: int, inputs_bytes: int, disk_bytes: int | None = None) -> int:
    """Bytes of the image for a workspace limit and the inputs copied in (read-only folders
    the watch does not count), with room for the filesystem itself; at most `disk_bytes`, the
    size of the filesystem holding the image. No run can write more than that disk holds,
    so the cap moves no wall, and `ls -la` shows no image longer than its disk (a 200g limit
    on a 64 GiB disk made a 221 GB file)."""
    payload = limit_bytes + inputs_bytes
    size = payload + OVERHEAD_BYTES + int(payload * OVERHEAD_FRACTION)
    return size if disk_bytes is None else min(size, disk_bytes)


def disk_bytes(folder: Path) -> int:
    """The size of the filesystem holding `folder` (all of it, not what is free now)."""
    st = os.statvfs(folder)
    return st.f_blocks * st.f_frsize


def tree_bytes(path: Path) -> int:
    """Bytes the regular files under `path` hold (the server's own inputs, not the agent's)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


# What a task copies in besides its base model (TASK.md, data, env files: a few MB for the
# paper's tasks). The image is sparse: room costs nothing until it is written.
INPUTS_ALLOWANCE = 512 << 20


def workspace_volume(mode: str, limit: str, base_model: Path, run_dir: Path,
                     workspace: Path) -> bool:
    """Make and mount the run's volume on its empty `workspace` when `mode` is auto and this
    machine can; False when the watch alone will limit the disk."""
    from a2rl.settings import parse_size

    limit_bytes = parse_size(limit)
    if mode == "off" or limit_bytes <= 0 or unavailable_reason() is not None:
        return False
    detach_orphans()  # this machine's crashed runs whose homes were removed since
    inputs = tree_bytes(base_model) + INPUTS_ALLOWANCE
    make(run_dir / IMAGE_NAME, workspace, image_size(limit_bytes, inputs, disk_bytes(run_dir)))
    return True


def remount(run_dir: Path, workspace: Path) -> None:
    """Mount a live run's volume again where it is not (the host rebooted, say)."""
    image = run_dir / IMAGE_NAME
    if image.is_file() and not os.path.ismount(workspace):
        mount(image, workspace)


def _run(argv: list[str]) -> None:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        detail = (p.stderr or p.stdout).strip().splitlines()
        raise VolumeError(f"{argv[0]} failed: {detail[-1] if detail else p.returncode}")


def make(image: Path, mountpoint: Path, size_bytes: int) -> None:
    """Create a sparse ext4 image of `size_bytes` and mount it on the empty `mountpoint`."""
    with open(image, "xb") as f:
        f.truncate(size_bytes)
    try:
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-i", str(BYTES_PER_INODE),
              "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", str(image)])
        mount(image, mountpoint)
        (mountpoint / "lost+found").rmdir()  # the agent's folder holds only what we put there
    except (VolumeError, OSError, subprocess.TimeoutExpired) as exc:
        unmount(mountpoint)
        image.unlink(missing_ok=True)
        raise VolumeError(f"cannot make the workspace volume: {exc}") from None


def mount(image: Path, mountpoint: Path) -> None:
    """Mount the image on `mountpoint` (again, e.g. after the host rebooted); no-op if it is."""
    if os.path.ismount(mountpoint):
        return
    # noinit_itable: no background thread zeroing inode tables into the sparse image.
    _run(["mount", "-o", "loop,nosuid,nodev,noinit_itable", str(image), str(mountpoint)])


def unmount(mountpoint: Path) -> None:
    """Detach the volume; what still holds it (a kept container) lets go when it ends."""
    if os.path.ismount(mountpoint):
        subprocess.run(["umount", "--lazy", str(mountpoint)], capture_output=True, timeout=60)


def _loop_devices() -> list[dict]:
    """`losetup`'s list of attached loop devices (name, back-file); empty when it fails."""
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        p = subprocess.run(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"],
                           capture_output=True, text=True, timeout=30)
        if p.returncode == 0 and p.stdout.strip():
            return list(json.loads(p.stdout).get("loopdevices", []))
    return []


def _unescape(field: str) -> str:
    """A mountinfo path: spaces and the like are written as octal escapes (`\\040`)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def mounts_of(device: str) -> list[str]:
    """The mount points of `device` (e.g. /dev/loop3) in this mount namespace, deepest first."""
    points = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) > 4 and len(tail) > 1 and tail[1] == device:
                points.append(_unescape(fields[4]))
    return sorted(points, reverse=True)


def loops_of(image: Path) -> list[str]:
    """The loop devices attached to `image` (its path as `losetup` shows it)."""
    target = str(image.resolve())
    return [d["name"] for d in _loop_devices() if d.get("back-file") == target]


def _free(device: str) -> None:
    """Unmount every mount of `device`, then let the loop device go (a `mount -o loop` one goes
    by itself at its last unmount; one attached otherwise is detached)."""
    for point in mounts_of(device):
        subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=60)
    if any(d["name"] == device for d in _loop_devices()):
        subprocess.run(["losetup", "--detach", device], capture_output=True, timeout=60)


def detach(run_dir: Path, mountpoint: Path, wait_s: float = 10.0) -> list[str]:
    """A finished run's release: unmount its volume and free its loop device; the files stay
    in the image. Returns what is still attached after `wait_s` (a kept container holding the
    mount lets it go when it ends); empty when all is released. No-op without a volume."""
    image = run_dir / IMAGE_NAME
    if os.path.ismount(mountpoint):
        # Not lazy first: nothing of a finished run should hold it, and a plain umount is
        # done when it returns; lazy only when something (a kept container) still does.
        p = subprocess.run(["umount", str(mountpoint)], capture_output=True, timeout=60)
        if p.returncode != 0:
            subprocess.run(["umount", "--lazy", str(mountpoint)], capture_output=True,
                           timeout=60)
    if not image.is_file():
        return []
    end = time.monotonic() + wait_s
    while True:
        left = loops_of(image)
        for device in left:
            if not mounts_of(device):  # autoclear may lag the unmount by a moment
                subprocess.run(["losetup", "--detach", device], capture_output=True, timeout=60)
        left = loops_of(image)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


DELETED = " (deleted)"


def detach_orphans() -> list[str]:
    """Free the loop devices of workspace images that were deleted while attached (a home
    removed with `rm -rf` under a run that never finished): no run can use them again.
    Returns the devices freed."""
    if os.geteuid() != 0:
        return []
    freed = []
    for d in _loop_devices():
        back = str(d.get("back-file") or "")
        if back.endswith(f"/{IMAGE_NAME}{DELETED}"):
            _free(d["name"])
            freed.append(d["name"])
    return freed
