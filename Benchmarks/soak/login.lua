-- wrk script of the soak benchmark: POST /oauth/token with a different pre-signed assertion on
-- every request, paced so that one round's assertions last the whole round.
--
-- Benchmarks/load/login.lua reads the assertions (KEYAUTH_ASSERTIONS: the round's file, one a
-- line; KEYAUTH_THREADS: wrk's -t, each thread taking every Nth line so that none is sent
-- twice). KEYAUTH_PAUSE_MS is the mean pause of a connection before each request (run.sh sets
-- it to 1.1 * connections * seconds / assertions, so the pauses alone spread the file over a
-- little more than the round and no connection runs out). Should a thread run out all the same, it
-- sends GET /healthz instead of a replay, stops, and done() reports it as "spare" requests.
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "../load/login.lua")

local read_assertions = init
local pause = tonumber(os.getenv("KEYAUTH_PAUSE_MS") or "0")

function init(args)
  read_assertions(args)
  sent = 0
  spare = 0
  math.randomseed(id * 7919 + os.time())
end

-- A uniformly drawn pause around the mean, so that the connections do not march in step.
function delay()
  return math.floor(pause * (0.5 + math.random()))
end

function request()
  if sent >= #assertions then
    spare = spare + 1
    wrk.thread:stop()
    return wrk.format("GET", "/healthz")
  end
  sent = sent + 1
  return wrk.format("POST", "/oauth/token", nil,
    "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" .. assertions[sent])
end

-- One line for run.sh: the logins sent and the spare requests, over all threads.
function done(summary, latency, requests)
  local logins, spares = 0, 0
  for _, thread in ipairs(threads) do
    logins = logins + thread:get("sent")
    spares = spares + thread:get("spare")
  end
  io.write(string.format("soak: logins %d spare %d\n", logins, spares))
end
