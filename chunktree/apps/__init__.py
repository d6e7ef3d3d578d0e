"""Applications built on the library: the command line (``cli``) and the HTTP service (``serve``).

Nothing in the library imports from here.
"""
