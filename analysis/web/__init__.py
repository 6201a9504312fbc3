"""`a2rl view`: a local, read-only web app over the store (runs, a run, compare, live).

    from a2rl.analysis.web import create_app
    app = create_app("sqlite:///runs.db")        # a Starlette app; serve it with uvicorn
"""

from .app import create_app, serve
from .readonly import ReadOnlyStore, StoreOpenError, open_readonly

__all__ = ["ReadOnlyStore", "StoreOpenError", "create_app", "open_readonly", "serve"]
