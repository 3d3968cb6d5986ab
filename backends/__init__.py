"""Local inference backends: vLLM replicas over HTTP and the in-process engine (issue 4), plus the
vLLM logits-processor plugins that serve Friendli's samplers (``vllm_plugins``)."""
