-- OpenAI dialect, chat: POST /v1/chat/completions with Authorization: Bearer <key>.
--   wrk -t1 -c8 -d5s -s benchmarks/wrk/openai-chat.lua http://127.0.0.1:PORT
-- Environment: see common.lua (BENCH_KEY, BENCH_MODEL, BENCH_STREAM).
local bench = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "common.lua")

wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. bench.key
wrk.body = bench.body("tiny", '"stream_options":{"include_usage":true}', true)
