#!/bin/bash
# Issue 35's "each defect has a test that fails without its fix", re-run: each fix is disabled by its
# patch here on a scratch worktree of HEAD, the defect's tests run (they must fail), the tree is put
# back. Usage: run.sh [LABEL...] (default: all). Needs the repository's .venv and a Redis as the
# integration tier does. Results: one line per label; pytest's output in $OUT (default /tmp).
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
out=${OUT:-/tmp}
# label | tests (pytest arguments)
TABLE='H1-M1|tests/unit/test_prompt_bound.py tests/integration/test_hard_budget.py
H1-chain|tests/unit/test_prompt_bound.py -k chain
H2|tests/integration/test_reservation_expiry.py
M1b|tests/integration/test_spend.py -k cut
M1-relayed|tests/integration/test_spend.py -k upper_bound_of_its_text
M1-anthropic|tests/integration/test_spend.py -k upper_bound_of_its_text
M2|tests/integration/test_cli.py::test_a_request_on_a_keep_alive_connection_during_the_drain_gets_503_at_once
M3|tests/integration/test_key_file_faults.py tests/unit/test_secrets.py
M4|tests/integration/test_key_file_faults.py
M5|tests/unit/test_kv_event_faults.py
M6|tests/integration/test_admin_faults.py::test_every_admin_path_answers_503_by_name_with_redis_down
M7|tests/unit/test_tracing_exit.py
L1|tests/integration/test_admin_faults.py::test_an_expiry_that_is_no_date_is_refused_by_name_and_nothing_is_stored
L2|tests/unit/test_log_safety.py
L3|tests/unit/test_config.py
L4|tests/integration/test_log_bounds.py tests/unit/test_throttle.py
L5|tests/integration/test_limit_faults.py tests/integration/test_limits.py
L5b|tests/integration/test_spend.py -k outage
L6|tests/integration/test_answer_budget.py
L7|tests/unit/test_vllm_egress.py'
scratch=$(mktemp -d)/tree
git -C "$repo" worktree add -q --detach "$scratch" HEAD
trap 'git -C "$repo" worktree remove --force "$scratch"' EXIT
while IFS='|' read -r label tests; do
  if [ $# -gt 0 ] && [[ " $* " != *" $label "* ]]; then continue; fi
  cd "$scratch" && git reset -q --hard && git clean -qfd
  if ! git apply "$here/$label.patch"; then echo "$label: the patch no longer applies"; continue; fi
  # shellcheck disable=SC2086  # the table's arguments split as written
  PYTHONPATH=$scratch timeout 900 "$repo/.venv/bin/pytest" -q -p no:cacheprovider $tests >"$out/issue35-$label.log" 2>&1
  rc=$?
  verdict=$([ $rc -eq 1 ] && echo "fails without its fix" || echo "DID NOT FAIL as expected (rc $rc)")
  echo "$label: $verdict: $(grep -E "[0-9]+ (passed|failed)" "$out/issue35-$label.log" | tail -1)"
done <<<"$TABLE"
