"""``python -m tpsim`` runs the ``tpsim`` command line."""

import sys

from tpsim.cli import main

sys.exit(main())
