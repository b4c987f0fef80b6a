"""`python -m fspo.data <name> [options]`: the same as `fspo data <name> [options]`."""

import sys

from fspo.data.registry import main

sys.exit(main())
