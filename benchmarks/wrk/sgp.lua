-- Scale SGP dialect: POST /v4/beta/completions with x-api-key: <key> and a vendor-prefixed model
-- (openai/tiny).
--   wrk -t1 -c8 -d5s -s benchmarks/wrk/sgp.lua http://127.0.0.1:PORT
-- Environment: see common.lua (BENCH_KEY, BENCH_MODEL, BENCH_STREAM).
local bench = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "common.lua")

wrk.method = "POST"
wrk.path = "/v4/beta/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-api-key"] = bench.key
wrk.body = bench.body("openai/tiny", nil)
