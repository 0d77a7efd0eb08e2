"""`python -m semipd` runs the `semipd` command."""

import sys

from semipd.cli import main

sys.exit(main())
