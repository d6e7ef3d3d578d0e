"""``python -m chunktree``: the command line."""

from chunktree.apps.cli import main

raise SystemExit(main())
