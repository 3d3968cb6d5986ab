"""What routing on vLLM's KV-cache events costs (``balance.kv_events``): on the request path, the
prompt tokenized (a chat rendered first) and hashed per block, and the views of a pool's replicas
asked how deep each holds it; off it, a batch of events decoded and applied. CPU time per call, the
best of several repeats, in this process (no server): the figures behind docs/vllm.md's "what it costs".

    python -m benchmarks.kv_events [--model DIR] [--replicas 4]

The tokenizer is the test tier's tiny model (``.vllm-model``, a 512-token byte-level BPE) unless
``--model`` names another; a real model's larger vocabulary tokenizes somewhat slower per character.
Writes ``benchmarks/results/kv_events.{json,md}``.
"""

from __future__ import annotations

import argparse
import timeit
from pathlib import Path
from typing import Any

import msgspec

from backends.pool.kv_events import DECODER, ReplicaView, chain_hashes
from backends.pool.prompt_tokens import PromptTokens
from benchmarks.machine import basic_meta, measured, write_report
from gateway.core.request import ChatMessage, InternalRequest, Operation

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "the quick brown fox jumps over the lazy dog gateway tests talk to a real inference server"
WORDS = SENTENCE.split()
BLOCK = 16  # vLLM's default block size on GPU; the CPU build uses 128 (fewer hashes)


def text(tokens_wanted: int, tok: PromptTokens) -> str:
    words: list[str] = []
    while len(tok.encode(" ".join(words), special=False)) < tokens_wanted:
        words.extend(WORDS)
    return " ".join(words)


def best(fn: Any, number: int) -> float:
    """Microseconds per call: the best of 5 repeats (the least disturbed by the other engineers' load)."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def stored_batch(tokens: list[int], start: int) -> bytes:
    """One batch as vLLM publishes it after a prefill: every full block of the prompt, one event."""
    full = len(tokens) // BLOCK * BLOCK
    event = {
        "type": "BlockStored",
        "block_hashes": list(range(start, start + full // BLOCK)),
        "parent_block_hash": None,
        "token_ids": tokens[:full],
        "block_size": BLOCK,
        "medium": "GPU",
    }
    return msgspec.msgpack.encode([0.0, [event], 0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(ROOT / ".vllm-model"))
    parser.add_argument("--replicas", type=int, default=4)
    args = parser.parse_args()
    tok = PromptTokens(args.model)
    rows: list[dict[str, Any]] = []
    for size in (256, 2048, 8192):
        prompt = text(size, tok)
        completion = InternalRequest(operation=Operation.COMPLETION, model="m", prompts=(prompt,))
        messages = (ChatMessage("system", "be brief"), ChatMessage("user", prompt))
        chat = InternalRequest(operation=Operation.CHAT, model="m", messages=messages)
        ids = tok.tokens(completion) or []
        views = [ReplicaView(1 << 20) for _ in range(args.replicas)]
        for i, view in enumerate(views):
            view.connected = True
            view.receive(0, DECODER.decode(stored_batch(ids[: len(ids) * (i + 1) // (args.replicas + 1)], i << 20)))
        hashes = chain_hashes(ids, BLOCK)
        batch = stored_batch(ids, 1 << 30)
        number = max(10, 20000 // size)

        def apply(batch: bytes = batch) -> None:
            ReplicaView(1 << 20).receive(0, DECODER.decode(batch))

        rows.append(
            {
                "prompt_tokens": len(ids),
                "tokenize_completion_us": round(best(lambda r=completion: tok.tokens(r), number), 1),
                "render_and_tokenize_chat_us": round(best(lambda r=chat: tok.tokens(r), number), 1),
                "hash_blocks_us": round(best(lambda i=ids: chain_hashes(i, BLOCK), number), 1),
                "depth_all_replicas_us": round(best(lambda h=hashes, vs=views: [v.depth(h) for v in vs], number), 1),
                "apply_stored_batch_us": round(best(apply, number), 1),
            }
        )
    meta = basic_meta("python -m benchmarks.kv_events", watch=("backends",))
    meta["note"] = (
        f"CPU time per call, best of 5 repeats, one process; tokenizer {Path(args.model).name}, "
        f"blocks of {BLOCK} tokens, {args.replicas} replicas' views."
    )
    cols = list(rows[0])
    lines = [measured(meta), "", "| " + " | ".join(c.replace("_", " ") for c in cols) + " |"]
    lines.append("|" + "---:|" * len(cols))
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    write_report(ROOT / "benchmarks" / "results", "kv_events", {"meta": meta, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
