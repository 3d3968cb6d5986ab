"""``python -m tests.fakes.openai_upstream``: serve the fake (prints ``READY <url>``)."""

from tests.fakes.openai_upstream.server import main

main()
