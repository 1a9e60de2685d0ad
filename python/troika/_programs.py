"""Finding Troika's programs (troika-coordinator, troikarun, troika-agent) from Python: for
front ends that start them themselves (troika.ray's driver starts a coordinator)."""

import os
import shutil
import sys


def find_program(name):
    """The path of Troika's program `name`: $TROIKA_<NAME>_BINARY (dashes as underscores),
    else the environment's bin/ (pip install puts them there), else PATH, else the build tree
    this package was copied into (BUILD/python/troika -> BUILD/<folder>/name). FileNotFoundError
    naming where it looked."""
    variable = "TROIKA_%s_BINARY" % name.replace("troika-", "").replace("-", "_").upper()
    given = os.environ.get(variable)
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.dirname(os.path.dirname(here))
    folders = {"troika-coordinator": "coordinator", "troikarun": "agent",
               "troika-agent": "agent", "troikactl": "coordinator"}
    candidates = [os.path.join(os.path.dirname(sys.executable), name)]
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    if name in folders:
        candidates.append(os.path.join(build, folders[name], name))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("cannot find %s: set %s, or install Troika (pip install troika puts "
                            "it in the environment's bin/); looked in %s"
                            % (name, variable, ", ".join(candidates)))
