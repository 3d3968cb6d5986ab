-- Shared by the per-dialect scripts (dofile'd, not run on its own).
--
-- Environment:
--   BENCH_KEY           the API key sent (default gw-bench-0123456789abcdef)
--   BENCH_MODEL         overrides the dialect's model name
--   BENCH_STREAM=1      ask for a streamed answer ("stream": true)
--
-- done() prints one line, "BENCH_JSON {...}", with counts, errors and latency percentiles in
-- microseconds; benchmarks/run.py reads it. Latency is wrk's: closed loop, from request write to the
-- last byte of the response (for a stream: to the end of the stream).
local M = {}

M.key = os.getenv("BENCH_KEY") or "gw-bench-0123456789abcdef"
M.stream = os.getenv("BENCH_STREAM") == "1"

-- The completion body: a short prompt, 16 tokens; stream_extra is added to streamed bodies only.
-- With chat, the same prompt as one user message (clients.py's Dialect.body says the same).
function M.body(model, stream_extra, chat)
  local input = '"prompt":"Say hello"'
  if chat then
    input = '"messages":[{"role":"user","content":"Say hello"}]'
  end
  local s = '{"model":"' .. (os.getenv("BENCH_MODEL") or model) .. '",' .. input .. ',"max_tokens":16'
  if M.stream then
    s = s .. ',"stream":true'
    if stream_extra then
      s = s .. ',' .. stream_extra
    end
  end
  return s .. '}'
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,'
      .. '"errors":{"status":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d},'
      .. '"latency_us":{"min":%d,"mean":%.1f,"stdev":%.1f,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.status, e.connect, e.read, e.write, e.timeout,
    latency.min, latency.mean, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max))
end

return M
