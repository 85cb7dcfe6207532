"""``python -m irad``: the same as the ``irad`` command."""
import sys

from irad.cli import main

sys.exit(main())
