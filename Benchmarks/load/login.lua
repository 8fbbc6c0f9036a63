-- wrk script: POST /oauth/token with a different pre-signed assertion on every request.
-- Each wrk thread takes every Nth line of the assertions file, so no assertion is sent twice
-- (a replay would be refused by keyauth-server and would not count as a login).
-- `assertions` (a thread's share) and `threads` are global for Benchmarks/soak/login.lua, which
-- loads this file and sends them its own way.
assertions = {}
threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end

function init(args)
  local file = os.getenv("KEYAUTH_ASSERTIONS")
  local stride = tonumber(os.getenv("KEYAUTH_THREADS") or "2")
  local index = 0
  for line in io.lines(file) do
    if index % stride == (id - 1) then table.insert(assertions, line) end
    index = index + 1
  end
  position = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
end

function request()
  position = position + 1
  local assertion = assertions[((position - 1) % #assertions) + 1]
  return wrk.format(nil, "/oauth/token", nil,
    "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" .. assertion)
end
