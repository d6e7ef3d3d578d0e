"""``python -m chunktree``: the command line."""

from chunktree.apps.cli.main import main

raise SystemExit(main())
