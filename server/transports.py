"""Transports: stdio for one run, streamable HTTP at /mcp for every run (token per run)."""

from __future__ import annotations

import anyio
from sqlmodel import select

from a2rl.settings import Settings
from a2rl.store import Run, Store

from .app import build_server


def adopt_on_start(store: Store) -> None:
    """Containers of live runs go on; those of finalized runs are removed."""
    with store.session() as s:
        docker_runs = s.exec(select(Run.id, Run.ended_at).where(Run.backend == "docker")).all()
    if docker_runs:
        from a2rl.tools.sandbox.docker import adopt_containers

        adopt_containers({run_id for run_id, ended in docker_runs if ended is None})


def serve_stdio(settings: Settings, store: Store, run_id: str) -> None:
    adopt_on_start(store)
    server = build_server(settings, store, run_id=run_id, transport="stdio")
    server.registry.pump.wake()  # drain what an earlier server left queued
    anyio.run(server.run_stdio_async)


def http_app(settings: Settings, store: Store):  # type: ignore[no-untyped-def]
    """The Starlette app (for tests and embedding); run `app.router.lifespan` as usual."""
    server = build_server(settings, store, run_id=None, transport="http")
    server.registry.pump.wake()

    @server.custom_route("/health", methods=["GET"])
    async def health(_request):  # type: ignore[no-untyped-def]
        from starlette.responses import JSONResponse

        return JSONResponse({"ok": True})

    return server.streamable_http_app(streamable_http_path="/mcp", host=settings.http_host)


def serve_http(settings: Settings, store: Store) -> None:
    import uvicorn

    adopt_on_start(store)
    config = uvicorn.Config(http_app(settings, store), host=settings.http_host,
                            port=settings.http_port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
