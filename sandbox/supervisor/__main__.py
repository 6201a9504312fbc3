"""`python -I <this folder> ...`: how every backend starts the supervisor.

Run as a folder, Python puts the folder itself first on sys.path and runs this file with no
package, so the modules' relative imports would fail. The folder is loaded here as the package
`a2rl_supervisor` instead, from this folder alone, and the folder is taken off sys.path: no
module of the supervisor's, nor of the standard library, can then be found anywhere a job could
write (`-I` already ignores the environment, the user's site-packages and the current folder).
On the host (`python -m a2rl.sandbox.supervisor`) it is an ordinary package.
"""

import sys

if __package__:
    from .main import main
else:
    import importlib.util
    import os

    _folder = sys.path.pop(0)
    _spec = importlib.util.spec_from_file_location(
        "a2rl_supervisor", os.path.join(_folder, "__init__.py"),
        submodule_search_locations=[_folder])
    assert _spec is not None and _spec.loader is not None
    _package = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _package
    _spec.loader.exec_module(_package)
    main = importlib.import_module("a2rl_supervisor.main").main

main()
