"""The sorter's Spark application file: ``crossfeed ARGS...`` inside the Spark driver.

The Spark operator (SparkApplication ``mainApplicationFile``) or ``spark-submit`` runs
this file; its arguments are a whole crossfeed command line, e.g. ``sorter run`` or
``--log-format json sorter run``, so the driver is exactly ``crossfeed sorter run``.
"""

from __future__ import annotations

import sys

from crossfeed.cli.main import app

if __name__ == "__main__":
    app(args=sys.argv[1:], prog_name="crossfeed")
