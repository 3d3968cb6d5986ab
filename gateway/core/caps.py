"""The bounds every request body is held to, the same on every ingress path and in every dialect.

Dialect schemas draw their ranges from here, the body check in ``dialects/common.py`` its list, map
and value counts, and the per-choice fan-out its concurrency. A client past a cap gets a 400 naming
the field (413 for a body too large to parse at all), never a slow or partial answer.

    what                                          cap                              why
    --------------------------------------------  -------------------------------  ----------------------------
    JSON values in a body over 128 KiB            65,536 ``MAX_JSON_VALUES``       parse time and memory; judged
      (text inside a few strings is not counted)                                   from the bytes, before parsing
    JSON nesting                                  200 levels                       the JSON parser's own limit
    choices: ``n``, ``best_of``, seed-list        128 ``MAX_CHOICES``              upstream work; a seed list is
      entries, prompts x choices                                                   one upstream call per entry
    upstream calls in flight per fan-out          8 ``FANOUT_CONCURRENCY``         leaves a target's connections
                                                                                   to other requests
    token ids in a request (prompts and every     32,768 ``MAX_TOKEN_IDS``         each is a Python int, built and
      token-id list together)                                                      checked on the event loop
    a token id                                    0 .. 2**31 - 1 ``MAX_TOKEN_ID``  int32, as engines store them
    ``logit_bias`` entries                        1,024 ``MAX_LOGIT_BIAS``         a map applied per sampled token
    any other list or map (messages, stop,        2,048 ``MAX_ITEMS``              bounds the checking of a wrong
      tools, content parts, opaque JSON ...)                                       body
    identifiers (model, user, names, ids ...)     256 characters ``MAX_NAME``
    token counts (``max_tokens`` and kin)         0 .. 2**24 ``MAX_TOKENS``        beyond any context window
    seeds                                         int64                            OpenAI's documented range
    timeouts                                      3,600 s ``MAX_TIMEOUT_S``
    ``temperature``                               0 .. 2; Friendli 0 .. 100        Friendli documents no bound
    penalties without a documented bound          0 < x <= 100 ``MAX_SCALE``       ``length_penalty``: +-100
    every number anywhere, opaque JSON included   finite                           ``Infinity``, ``NaN`` are not
                                                                                   JSON; ``1e400`` parses as inf

Free text (a prompt, message content, a grammar) is bounded by the server's body size alone.
"""

from __future__ import annotations

MAX_JSON_VALUES = 65_536
# A body of this size or less cannot hold more values than the cap (each takes two bytes at least).
UNCOUNTED_BODY = 2 * MAX_JSON_VALUES
MAX_CHOICES = 128
FANOUT_CONCURRENCY = 8
MAX_TOKEN_IDS = 32_768
MAX_TOKEN_ID = 2**31 - 1
MAX_LOGIT_BIAS = 1_024
MAX_ITEMS = 2_048
MAX_NAME = 256
MAX_TOKENS = 2**24
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
MAX_TIMEOUT_S = 3_600
MAX_SCALE = 100.0

# Fields whose lists may be longer than ``MAX_ITEMS`` (by the client's field name, any dialect); any
# list nested in one (a batch of token-id prompts) shares its cap.
LIST_CAPS: dict[str, int] = {
    "prompt": MAX_TOKEN_IDS,
    "input": MAX_TOKEN_IDS,  # embeddings: texts or token ids (a Responses input's items: ``MAX_ITEMS``, by its schema)
    "tokens": MAX_TOKEN_IDS,
    "stop_token_ids": MAX_TOKEN_IDS,
    "eos_token": MAX_TOKEN_IDS,
    "forced_output_tokens": MAX_TOKEN_IDS,
    "token_index_to_replace": MAX_TOKEN_IDS,
    "embedding_to_replace": MAX_TOKEN_IDS,
    "position_ids": MAX_TOKEN_IDS,
    "seed": MAX_CHOICES,
    "logit_bias": MAX_LOGIT_BIAS,
}
# Fields whose integers are token ids: checked for range in one pass, before the schema sees them.
TOKEN_ID_FIELDS = frozenset(
    {"prompt", "input", "tokens", "stop_token_ids", "eos_token", "forced_output_tokens", "token_index_to_replace"}
)
