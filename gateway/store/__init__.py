"""Shared state's client: the one Redis connection the keystore, audit, limits, stored responses and
the replica pools use (``redis_client``). Built once by the composition root and passed in; a layer
that only receives the client never needs this package, one that names its type may import it."""
