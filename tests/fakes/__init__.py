"""The stand-in upstream (``upstream``) the tests and the benchmarks run against, and its self-test."""
