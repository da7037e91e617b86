"""Print the requirements of the crossfeed package, or of one of its extras, one a line.

The images install dependencies in layers of their own, before the crossfeed wheel, so
that a code change does not reinstall them: `python requirements.py` gives the base
dependencies of the pyproject.toml next to this file, `python requirements.py sorter`
those of the sorter extra; pip reads them from stdin, pinned by constraints.txt.
"""

import sys
import tomllib
from pathlib import Path

with open(Path(__file__).with_name("pyproject.toml"), "rb") as file:
    project = tomllib.load(file)["project"]
extra = sys.argv[1] if len(sys.argv) > 1 else None
if extra is None:
    print(*project["dependencies"], sep="\n")
elif extra in project["optional-dependencies"]:
    print(*project["optional-dependencies"][extra], sep="\n")
else:
    sys.exit(f"no extra {extra!r} in pyproject.toml")
