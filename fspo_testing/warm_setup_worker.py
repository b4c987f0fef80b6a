"""What a test cluster's raylet runs in place of Ray's ``setup_worker.py`` (see ``warm_python.RAY_SETUP_SCRIPT``).

Ray's script, found beside the worker script named in the arguments, runs as it would, with these arguments, but
forked from a warm server that imported ray once. Without a warm server (no ``FSPO_WARM_OWNER``) it runs cold.
"""

import os
import sys

from warm_python import RAY_SETUP_SCRIPT, RAY_WORKER_SCRIPT, client_main  # this folder is sys.path[0]

worker_script = next(arg for arg in sys.argv[1:] if arg.endswith(RAY_WORKER_SCRIPT))
setup_script = os.path.join(os.path.dirname(worker_script), os.path.basename(RAY_SETUP_SCRIPT))
client_main([setup_script, *sys.argv[1:]])
