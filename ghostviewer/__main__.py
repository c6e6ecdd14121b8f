"""`python -m ghostviewer` is the `ghostviewer` command."""

import sys

from ghostviewer.cli import main

sys.exit(main())
