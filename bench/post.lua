-- wrk script for the benchmarks (bench/run.py runs it): POST one body (an image generation unless
-- BENCH_BODY gives another), and print
-- the run's numbers as one JSON line (prefixed "BENCH_JSON ") from done().
--
-- Environment:
--   BENCH_KEY           API key sent as "Authorization: Bearer ..." (unset: no header, e.g. direct
--                       calls to the fake upstream)
--   BENCH_MODEL         the "model" field of the image body
--   BENCH_BODY          the body to send instead of the image body (JSON text), when set
--   BENCH_HEADERS       more request headers, "Name: value" lines
--   BENCH_PATH          request path (default /v1/images/generations)
--   BENCH_MAX_REQUESTS  stop after this many responses (per wrk thread); the -d duration still bounds
--                       the run. Use with -t 1 for an exact count.
--   BENCH_HISTOGRAM     when set, the JSON line also carries "latency_us": every distinct latency in
--                       microseconds with its count, [[value, count], ...], so that the latencies of
--                       several runs can be merged exactly (bench/run.py's interleaved rounds)

local key = os.getenv("BENCH_KEY")
local model = os.getenv("BENCH_MODEL") or "bench-image"
local max_requests = tonumber(os.getenv("BENCH_MAX_REQUESTS") or "0")
local histogram = (os.getenv("BENCH_HISTOGRAM") or "") ~= ""

wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/v1/images/generations"
wrk.headers["Content-Type"] = "application/json"
if key and key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end
for line in (os.getenv("BENCH_HEADERS") or ""):gmatch("[^\n]+") do
  local name, value = line:match("^([^:]+):%s*(.*)$")
  if name then
    wrk.headers[name] = value
  end
end
local body = os.getenv("BENCH_BODY")
if body and body ~= "" then
  wrk.body = body
else
  wrk.body = '{"model":"' .. model .. '","prompt":"a lighthouse at dawn","n":1,'
    .. '"size":"1024x1024","response_format":"b64_json"}'
end

-- Only defined when a count is asked for: a response() callback makes wrk hand every response to
-- Lua, which costs time on large bodies.
if max_requests > 0 then
  local seen = 0
  function response(status, headers, body)
    seen = seen + 1
    if seen == max_requests then
      -- The thread ends; bench/run.py sees it go and sends wrk SIGINT, which ends the -d sleep of
      -- wrk's main thread (done() still reports).
      wrk.thread:stop()
    end
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  local function pct(p)
    return latency:percentile(p) / 1000.0 -- microseconds -> ms
  end
  local extra = ""
  if histogram then
    -- latency(i): the i-th distinct value (microseconds) and how many requests took it
    local pairs_ = {}
    for i = 1, #latency do
      local value, count = latency(i)
      pairs_[#pairs_ + 1] = string.format("[%d,%d]", value, count)
    end
    extra = ',"latency_us":[' .. table.concat(pairs_, ",") .. "]"
  end
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_s":%.3f,"bytes":%d,"rps":%.2f,'
      .. '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,"mean_ms":%.3f,'
      .. '"non_2xx":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d%s}\n',
    summary.requests, summary.duration / 1e6, summary.bytes,
    summary.requests / (summary.duration / 1e6),
    pct(50), pct(90), pct(99), latency.max / 1000.0, latency.mean / 1000.0,
    e.status, e.connect, e.read, e.write, e.timeout, extra))
end
