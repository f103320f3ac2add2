"""``python -m simulator`` runs the ``tpsim`` command line."""

import sys

from simulator.cli import main

sys.exit(main())
