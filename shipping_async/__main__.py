"""``python -m shipping_async``: the command line."""

import sys

from shipping_async.cli import main

sys.exit(main())
