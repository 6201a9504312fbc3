"""`python -I <this folder> ...`: how the server starts a run's access recorder.

Loaded as the package `a2rl_recorder` from this folder alone, as the supervisor is (see
supervisor/__main__.py): the recorder imports nothing but the standard library, so it starts
in a few hundredths of a second and no module of a2rl's is loaded into it.
"""

import sys

if __package__:
    from .main import main
else:
    import importlib.util
    import os

    _folder = sys.path.pop(0)
    _spec = importlib.util.spec_from_file_location(
        "a2rl_recorder", os.path.join(_folder, "__init__.py"),
        submodule_search_locations=[_folder])
    assert _spec is not None and _spec.loader is not None
    _package = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _package
    _spec.loader.exec_module(_package)
    main = importlib.import_module("a2rl_recorder.main").main

main()
