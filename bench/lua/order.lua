-- POST /v1/store/orders (with the beta opt-in), pet ids by a counter from a first id: each request
-- a pet of its own, or, given a cycle length, round and round the same few (the race workload).
-- Counts the answers by status and prints them for the bench: "script <status> <count>".
-- Arguments (after --): the API key, the first pet id, the cycle length (0: never repeat).
local first, cycle
local counter = 0
-- A global: done() reads it from the thread with thread:get.
counts = {}
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
end

function init(args)
  wrk.method = "POST"
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Animal-Store-Beta"] = "orders"
  first = tonumber(args[2])
  cycle = tonumber(args[3])
end

function request()
  local n = cycle > 0 and counter % cycle or counter
  counter = counter + 1
  return wrk.format(nil, nil, nil, '{"petId":' .. (first + n) .. "}")
end

function response(status)
  counts[status] = (counts[status] or 0) + 1
end

function done()
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("counts")) do
      io.write("script " .. status .. " " .. count .. "\n")
    end
  end
end
