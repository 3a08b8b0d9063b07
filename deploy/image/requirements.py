"""Print the package's dependencies from pyproject.toml, one per line, for pip's ``-r``:
``python requirements.py`` the service's, ``python requirements.py spark`` those of the
``spark`` extra as well.

The Dockerfile installs them in a layer of their own, before the package's code is
copied in, so that a change of the code rebuilds the package alone and not every
dependency's wheel (pyspark's among them)."""

from __future__ import annotations

import sys
import tomllib

with open("pyproject.toml", "rb") as file:
    project = tomllib.load(file)["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[1:]:
    requirements += project["optional-dependencies"][extra]
print("\n".join(requirements))
