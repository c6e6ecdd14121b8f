"""`python -m ghostviewer` is the `ghostviewer` command; it is also the packaged app's entry (packaging/), whose
engine process is the same executable run with `--engine-server`."""

import sys

from ghostviewer.cli import entry_point

if __name__ == "__main__":
    sys.exit(entry_point(sys.argv[1:])())
