"""``python -m triec.bench ...`` = ``triec bench ...`` (e.g. on a machine where the console script is not on PATH)."""

import sys

from triec.cli import main

if __name__ == "__main__":
    sys.argv[1:1] = ["bench"]
    main()
