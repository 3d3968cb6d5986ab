-- Anthropic dialect: POST /v1/messages with x-api-key and anthropic-version (a chat: messages).
--   wrk -t1 -c8 -d5s -s benchmarks/wrk/anthropic.lua http://127.0.0.1:PORT
-- Environment: see common.lua (BENCH_KEY, BENCH_MODEL, BENCH_STREAM).
local bench = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "common.lua")

wrk.method = "POST"
wrk.path = "/v1/messages"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-api-key"] = bench.key
wrk.headers["anthropic-version"] = "2023-06-01"
wrk.body = bench.body("tiny", nil, true)
