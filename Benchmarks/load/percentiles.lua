-- wrk script: login.lua's requests, and at the end the latency ladder from p50 to p99.9 in
-- milliseconds, one "percentile P MS" line each (tail.sh reads them).
dofile("Benchmarks/load/login.lua")

function done(summary, latency, requests)
  for _, p in ipairs({50, 75, 90, 95, 98, 99, 99.5, 99.9}) do
    io.write(string.format("percentile %s %.2f\n", p, latency:percentile(p) / 1000))
  end
end
