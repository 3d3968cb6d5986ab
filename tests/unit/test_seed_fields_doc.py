"""Every field of the four seed API pages is in docs/dialects.md's "Seed fields on each target" table,
said to be served on some targets or refused for a stated reason (issue 28). The lists are the seed
pages' own fields (../shared/seeds), copied here: the repository does not hold the pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "dialects.md"
FRIENDLI = (  # seed 000 (current) and 002 (2024)
    "model prompt tokens max_tokens max_total_tokens min_tokens min_total_tokens temperature top_p top_k min_p "
    "xtc_threshold xtc_probability n seed stop stop_tokens eos_token bad_words bad_word_tokens presence_penalty "
    "frequency_penalty repetition_penalty no_repeat_ngram encoder_repetition_penalty encoder_no_repeat_ngram "
    "logprobs forced_output_tokens token_index_to_replace embedding_to_replace response_format stream "
    "stream_options timeout_microseconds num_beams length_penalty early_stopping beam_search_type "
    "beam_compat_pre_normalization beam_compat_no_post_normalization include_output_logits include_output_logprobs"
)
SGP = (  # seed 001 (/v4/beta)
    "model prompt max_new_tokens temperature stop_sequences return_token_log_probs presence_penalty "
    "frequency_penalty top_p top_k include_stop_str_in_output guided_json guided_regex guided_choice guided_grammar "
    "stream stream_options stop logit_bias logprobs top_logprobs max_tokens max_completion_tokens n seed suffix "
    "response_format tools tool_choice parallel_tool_calls audio modalities prediction user best_of "
    "inference_timeout inference_extra_params inference_extra_headers"
)
OCTOAI = (  # seed 003
    "model prompt max_tokens temperature top_p min_p n best_of presence_penalty frequency_penalty "
    "repetition_penalty logit_bias logprobs loglikelihood echo ignore_eos stop seed suffix user peft log_prompt "
    "stream stream_options"
)


def table() -> str:
    text = DOC.read_text()
    start = text.index("## Seed fields on each target")
    return text[start : text.index("\n## ", start + 1) if "\n## " in text[start + 1 :] else len(text)]


def first_cells(section: str) -> set[str]:
    """The backticked names in the first cell of each row."""
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


@pytest.mark.parametrize("field", sorted(set(f"{FRIENDLI} {SGP} {OCTOAI}".split())))
def test_every_seed_field_is_in_the_table(field: str) -> None:
    assert field in first_cells(table()), f"docs/dialects.md: seed field '{field}' is not in the table"


def test_every_row_says_where_or_why() -> None:
    rows = [line.split("|")[1:-1] for line in table().splitlines() if line.startswith("| `")]
    assert rows and all(len(r) == 3 and r[1].strip() and r[2].strip() for r in rows)
