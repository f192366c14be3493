"""`python -m app.cli` is `hilo`."""

import sys

from app.cli import main

sys.exit(main())
