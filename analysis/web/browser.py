"""The viewer served in a thread and Debian's Chromium driven by Playwright: shared by the
browser tests, the README's screenshot (`scripts/view-screenshot.sh`) and `bench/view_scale.py`.

Playwright is a dev dependency and is imported only here; no browser is downloaded: the
system's `chromium` is launched with flags that keep it offline and quiet.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from .app import create_app, loopback_hosts

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def chromium_path() -> str | None:
    found = shutil.which("chromium")
    if found:
        return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(url: str, token: str | None = None) -> Iterator[str]:
    """The viewer over the store at `url` on a loopback port; yields its base URL."""
    port = free_port()
    app = create_app(url, token=token, hosts=None if token else loopback_hosts("127.0.0.1"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            try:
                httpx.get(base + "/healthz", timeout=1, params={"token": token or ""})
                break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise RuntimeError("the viewer did not start")
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def browser_page(viewport: tuple[int, int] = (1280, 900)) -> Iterator[tuple[Any, list[str]]]:
    """A Chromium page and the list its console errors and page errors land in."""
    # a dev dependency: importing this module (for `served`) must not need it
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        raise RuntimeError("chromium is not installed")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            yield page, errors
        finally:
            browser.close()


def screenshot(page: Any, path: Path, full_page: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path
