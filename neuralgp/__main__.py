"""`python -m neuralgp …` runs the command line (as `torchrun -m neuralgp …` will)."""

import sys

from neuralgp.cli import main

sys.exit(main())
