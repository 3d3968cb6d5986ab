-- OctoAI dialect: POST /v1/completions with Authorization: Bearer <key>. The body has no OctoAI-only
-- key (no peft), so the gateway tells the dialect by the SDK's header (X-Fern-SDK-Name: octoai), as it
-- does for the octoai SDK's own requests.
--   wrk -t1 -c8 -d5s -s benchmarks/wrk/octoai.lua http://127.0.0.1:PORT
-- Environment: see common.lua (BENCH_KEY, BENCH_MODEL, BENCH_STREAM).
local bench = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "common.lua")

wrk.method = "POST"
wrk.path = "/v1/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. bench.key
wrk.headers["X-Fern-SDK-Name"] = "octoai"
wrk.body = bench.body("tiny", nil)
