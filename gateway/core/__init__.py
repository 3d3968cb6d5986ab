"""The core vocabulary: internal request, answer and stream events, errors, the upstream contract.

Imports nothing else of ours and no web framework (``tests/test_layering.py`` checks it)."""
