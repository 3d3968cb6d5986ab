-- FriendliAI serverless dialect: POST /serverless/v1/completions with Authorization: Bearer <key>
-- and X-Friendli-Team (the gateway team the key belongs to; BENCH_TEAM, default team1).
--   wrk -t1 -c8 -d5s -s benchmarks/wrk/friendli.lua http://127.0.0.1:PORT
-- Environment: see common.lua (BENCH_KEY, BENCH_MODEL, BENCH_STREAM).
local bench = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "common.lua")

wrk.method = "POST"
wrk.path = "/serverless/v1/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. bench.key
wrk.headers["X-Friendli-Team"] = os.getenv("BENCH_TEAM") or "team1"
wrk.body = bench.body("tiny", '"stream_options":{"include_usage":true}')
