"""vLLM logits-processor plugins serving FriendliAI samplers that vLLM lacks natively.

Module, class and its ``vllm_xargs`` keys:

* ``no_repeat_ngram.NoRepeatNGramLogitsProcessor``: ``no_repeat_ngram_size`` (Friendli ``no_repeat_ngram``)
* ``xtc.XTCLogitsProcessor``: ``xtc_threshold``, ``xtc_probability`` (Friendli, same names)
* ``forced_output.ForcedOutputLogitsProcessor``: ``forced_output_tokens`` (Friendli, same name)
* ``total_length.TotalLengthLogitsProcessor``: ``min_total_tokens``, ``max_total_tokens`` (Friendli, same names)
* ``bad_word_tokens.BadWordTokensLogitsProcessor``: ``bad_word_tokens`` (Friendli, same name)
* ``stop_sequences.StopSequencesLogitsProcessor``: ``stop_token_sequences`` (Friendli ``stop_tokens`` of
  more than one token; one-token ones go to vLLM's own ``stop_token_ids``)

Loading: installing this project into vLLM's environment (``scripts/vllm-env`` does
``pip install --no-deps -e .``) registers all six under the ``vllm.logits_processors`` entry-point
group (pyproject.toml), which vLLM loads at start-up; do not also name them in
``--logits-processors``, or each would run twice.

Switching on: per request through ``SamplingParams.extra_args`` (HTTP: ``vllm_xargs``), which the
gateway's vLLM egress writes. A request without the keys is left alone. Each class's
``validate_params`` rejects bad values with ``VLLMValidationError`` (HTTP 400, ``param`` set to the key).

Interface: vLLM's V1 model-runner logits processors (``vllm.v1.sample.logits_processor``), the one the
CPU build runs. On GPUs vLLM 0.32+ defaults to Model Runner V2, which rejects these classes: run GPU
replicas with ``VLLM_USE_V2_MODEL_RUNNER=0`` and ``--no-async-scheduling`` (with async scheduling, vLLM
only fills in the last sampled token ids for processors named in ``--logits-processors``, so an
entry-point plugin would see ``-1`` placeholders; ``no_repeat_ngram`` needs the real ids).

These modules import torch and vLLM; nothing but vLLM imports them (the package marker here does not).
"""
