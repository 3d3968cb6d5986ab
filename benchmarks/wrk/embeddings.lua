-- OpenAI embeddings: POST /v1/embeddings with Authorization: Bearer <key> (no streams).
--   wrk -t1 -c8 -d5s -s benchmarks/wrk/embeddings.lua http://127.0.0.1:PORT
-- Environment: see common.lua (BENCH_KEY, BENCH_MODEL).
local bench = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "common.lua")

wrk.method = "POST"
wrk.path = "/v1/embeddings"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. bench.key
wrk.body = '{"model":"' .. (os.getenv("BENCH_MODEL") or "tiny-embed") .. '","input":"Say hello"}'
