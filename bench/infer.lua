-- infer.lua -- the wrk script of bench/http_bench.sh: POSTs one KServe v2
-- inference of the demo MLP (batch 1, 64 floats) to /v2/models/mlp/infer,
-- and ends with one machine-readable line.
--
--   wrk -t T -c C -d 10s -s bench/infer.lua --latency http://127.0.0.1:PORT
--
-- The body is built once, when wrk loads the script, from a fixed formula:
-- every request and every run sends the same bytes, so runs compare, and
-- wrk's request loop does no Lua work (no request() or response() function,
-- which would cost client CPU on a machine the server shares).
--
-- The last line printed is
--   wrk_result rps=R p50_ms=X p99_ms=Y non2xx=N socket_errors=S requests=Q
-- non2xx is wrk's summary.errors.status, the responses with a status of 400
-- or more; wrk cannot see 1xx/3xx without a response() function, and the
-- servers measured send none. socket_errors adds up connect, read, write
-- and timeout errors (a request with no answer at all).

local values = {}
for i = 0, 63 do
    -- Deterministic, inside [-1, 1], with no two neighbours alike.
    values[#values + 1] = string.format("%.4f", math.sin(i * 0.37) * 0.9)
end

wrk.method = "POST"
wrk.path = "/v2/models/mlp/infer"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":['
    .. table.concat(values, ",") .. "]}]}"

function done(summary, latency, requests)
    local e = summary.errors
    local seconds = summary.duration / 1e6
    io.write(string.format(
        "wrk_result rps=%.2f p50_ms=%.3f p99_ms=%.3f non2xx=%d socket_errors=%d requests=%d\n",
        seconds > 0 and summary.requests / seconds or 0,
        latency:percentile(50) / 1000, latency:percentile(99) / 1000,
        e.status, e.connect + e.read + e.write + e.timeout, summary.requests))
end
