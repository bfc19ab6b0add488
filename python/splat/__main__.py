"""`python -m splat`: the same command line as the `splat` script."""
import sys

from .cli import main

sys.exit(main())
