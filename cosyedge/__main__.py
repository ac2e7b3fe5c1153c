"""`python -m cosyedge ...` runs the command-line interface."""

import sys

from cosyedge.cli import main

sys.exit(main())
