"""``python -m ccweave`` runs the CLI."""

import sys

from ccweave.cli import main

sys.exit(main())
