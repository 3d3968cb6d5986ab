-- OpenAI Responses: POST /v1/responses with Authorization: Bearer <key> (input, max_output_tokens).
--   wrk -t1 -c8 -d5s -s benchmarks/wrk/responses.lua http://127.0.0.1:PORT
-- Environment: see common.lua (BENCH_KEY, BENCH_MODEL, BENCH_STREAM).
local bench = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "common.lua")

wrk.method = "POST"
wrk.path = "/v1/responses"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. bench.key
local body = '{"model":"' .. (os.getenv("BENCH_MODEL") or "tiny") .. '","input":"Say hello","max_output_tokens":16'
if bench.stream then
  body = body .. ',"stream":true'
end
wrk.body = body .. '}'
