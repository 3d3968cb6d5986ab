"""The routing benchmark's yardsticks, computed offline from the prompts as sent (token ids, in order):
what share of prompt tokens a router that knew every replica's prefix cache could have served from it,
what round-robin can be expected to, and how large the prompts' shared working set is.

* ``unbounded_rate``: one cache that never forgets: every leading full block an earlier prompt shares is
  a hit. An upper bound no router reaches when the working set is larger than the caches.
* ``bounded_rate``: the replicas as configured. Each replica's cache is an LRU of ``capacity`` blocks;
  each prompt goes to the replica holding its longest cached prefix, among those that would stay within
  ``max_load`` times the mean number of requests so far (ties: the one with fewer requests), and its
  full blocks then enter that replica's LRU. The greedy choice of a router that sees the caches, which
  is what the issue's goal compares against. More replicas do not always raise it (the greedy split of
  new prefixes can come out worse), but with caches that never evict it is the unbounded rate.
* ``round_robin_rate``: the same LRUs, the prompts dealt out in turn: every replica sees every prefix,
  so when the working set is larger than one cache it keeps about ``capacity / working set`` of it.
* ``working_set``: the full blocks more than one prompt shares, the figure to hold against one
  replica's cache and all of them together.

Modelled as vLLM counts and evicts (v1 ``KVCacheManager``): a hit is a leading full block, and never the
block holding the prompt's last token (vLLM computes that token itself); a finished request's blocks are
freed tail first, so its leading (shared) blocks are the last of them to be evicted. Running requests are
modelled simply: each holds one partial block (its prompt's tail and the tokens it generates) outside the
cache, so the caller passes ``capacity = blocks - max_num_seqs``; their full blocks are the most recently
used, which an LRU keeps anyway. Time is not modelled: a prompt's blocks are cached from the moment it is
sent, as if requests did not overlap.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

Cache = OrderedDict[int, None]  # one replica's cached blocks, least recently used first


def chain(tokens: list[int], block: int) -> list[int]:
    """One key per full block, standing for the whole prefix up to it (as vLLM's chained block hashes)."""
    keys: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - block + 1, block):
        parent = hash((parent, tuple(tokens[start : start + block])))
        keys.append(parent)
    return keys


def usable(tokens: list[int], block: int) -> int:
    """Full blocks a cache may serve: not the one holding the last token."""
    return (len(tokens) - 1) // block


def cached_depth(keys: list[int], limit: int, cached: Cache | set[int]) -> int:
    """How many of the leading ``keys`` (at most ``limit``) are cached."""
    k = 0
    while k < limit and keys[k] in cached:
        k += 1
    return k


def admit(cache: Cache, keys: list[int], capacity: int) -> None:
    """A served prompt's full blocks enter the LRU, tail first: its leading blocks end up the most
    recently used, as vLLM frees them."""
    for key in reversed(keys):
        cache[key] = None
        cache.move_to_end(key)
    while len(cache) > capacity:
        cache.popitem(last=False)


def unbounded_rate(prompts: list[list[int]], block: int) -> float:
    """The hit rate if every prompt went where all earlier prompts' full blocks are cached."""
    seen: set[int] = set()
    hits = queries = 0
    for tokens in prompts:
        keys = chain(tokens, block)
        hits += cached_depth(keys, usable(tokens, block), seen) * block
        queries += len(tokens)
        seen.update(keys)
    return hits / queries if queries else 0.0


def bounded_rate(prompts: list[list[int]], block: int, replicas: int, capacity: int, max_load: float = 1.5) -> float:
    """The hit rate of the greedy router that sees ``replicas`` LRU caches of ``capacity`` blocks each."""
    caches = [Cache() for _ in range(replicas)]
    served = [0] * replicas
    hits = queries = 0
    for tokens in prompts:
        keys = chain(tokens, block)
        depth = [cached_depth(keys, usable(tokens, block), cache) for cache in caches]
        bound = max_load * (sum(served) + 1) / replicas
        allowed = [r for r in range(replicas) if served[r] + 1 <= bound] or [served.index(min(served))]
        r = max(allowed, key=lambda i: (depth[i], -served[i]))
        hits += depth[r] * block
        queries += len(tokens)
        served[r] += 1
        admit(caches[r], keys, capacity)
    return hits / queries if queries else 0.0


def round_robin_rate(prompts: list[list[int]], block: int, replicas: int, capacity: int) -> float:
    """The hit rate of the same LRU caches with the prompts dealt out in turn, whatever they hold."""
    caches = [Cache() for _ in range(replicas)]
    hits = queries = 0
    for i, tokens in enumerate(prompts):
        keys, cache = chain(tokens, block), caches[i % replicas]
        hits += cached_depth(keys, usable(tokens, block), cache) * block
        queries += len(tokens)
        admit(cache, keys, capacity)
    return hits / queries if queries else 0.0


def working_set(prompts: list[list[int]], block: int) -> int:
    """The distinct full blocks (as prefixes: the chained keys) that more than one prompt holds."""
    holders = Counter(key for tokens in prompts for key in set(chain(tokens, block)[: usable(tokens, block)]))
    return sum(1 for n in holders.values() if n > 1)
