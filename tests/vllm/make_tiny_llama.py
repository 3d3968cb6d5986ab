"""Builds a tiny randomly initialised Llama and a byte-level BPE tokenizer trained on a few lines,
as a Hugging Face directory, so the real vLLM engine runs here with nothing downloaded.
Run with the vLLM environment's Python: ``.vllm-venv/bin/python tests/vllm/make_tiny_llama.py DIR``.
head_dim is 32 because vLLM's CPU attention backend refuses smaller heads."""

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "gateway tests talk to a real inference server",
    "FriendliAI Scale SGP OctoAI OpenAI completions",
    'yes no 0123456789 {}[]:," true false null',
] * 50
# server.MAX_MODEL_LEN's room: vLLM's rotary embedding keeps a cos/sin row per position up to this, and
# its CPU kernel does not check the bound (docs/vllm.md); vLLM refuses a longer --max-model-len.
POSITIONS = 32768


def main(out: str) -> None:
    torch.manual_seed(0)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    hf_tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    hf_tok.save_pretrained(out)
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=POSITIONS,
        rms_norm_eps=1e-5,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id).save_pretrained(out)
    print("wrote", out, "vocab", len(hf_tok))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama")
