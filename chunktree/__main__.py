import sys

from chunktree.engine.cli import main

sys.exit(main())
