"""The replica pool: one upstream over several model-server replicas behind HTTP (``replicas``),
choosing a replica per request by load and by the prompt's cached prefix.

``replicas`` is the pool and its gauge scraper; ``balance`` scores replicas (round robin, least
loaded, prefix affinity); ``inflight`` keeps the per-replica in-flight counts shared through Redis;
``prefix_index`` is the prefix-to-replica index (in process or in Redis); ``kv_events``, ``kv_router``
and ``prompt_tokens`` route on vLLM's own KV-cache events (the ``kv-events`` extra). Nothing is
imported here: the events modules need an optional extra, and each user imports the module it needs.
"""
