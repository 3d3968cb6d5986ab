"""Prints a model's input-embedding matrix (``model.embed_tokens.weight``) as JSON rows, read from its
safetensors file. Run with the vLLM environment's Python (the test process has no torch):
``.vllm-venv/bin/python tests/vllm/embedding_rows.py MODEL_DIR``."""

import json
import sys
from pathlib import Path

from safetensors import safe_open


def main(model_dir: str) -> None:
    with safe_open(str(Path(model_dir) / "model.safetensors"), framework="pt") as f:
        weight = f.get_tensor("model.embed_tokens.weight")
    json.dump(weight.tolist(), sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
