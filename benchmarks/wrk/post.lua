-- POST one JSON body with the dialect's headers; BODY, PATH and HEADERS come from the environment.
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH")
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
for pair in string.gmatch(os.getenv("BENCH_HEADERS") or "", "[^|]+") do
  local k, v = string.match(pair, "([^:]+):%s*(.*)")
  wrk.headers[k] = v
end


done = function(summary, latency, requests)
  io.write(string.format(
    'JSON {"requests":%d,"seconds":%.3f,"p50_us":%d,"p99_us":%d,"mean_us":%.1f,"non200":%d,"socket_errors":%d}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50), latency:percentile(99), latency.mean,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
