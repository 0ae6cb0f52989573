"""``python -m hiclass_parallel`` runs the command line (see :mod:`hiclass_parallel.cli`)."""

from .cli import main

raise SystemExit(main())
