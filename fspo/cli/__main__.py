"""``python -m fspo.cli``: the ``fspo`` command without its console script."""

import sys

from fspo.cli import main

sys.exit(main())
