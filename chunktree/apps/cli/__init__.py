"""The ``chunktree`` command line (``main``): the only place that prints. The options several
commands share are declared once (``options``), what they share at run time is in ``common``,
and each group of commands is a module of its own with its ``register``."""
