"""``python -m gateway`` is the ``llm-gateway`` command."""

from gateway.cli import main

raise SystemExit(main())
