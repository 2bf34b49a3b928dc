-- The reads of mix.lua (per ten requests five GET /v1/pets?limit=20 and four GET /v1/pets/{id}),
-- with the tenth an order's write: POST /v1/store/orders for the next available pet of the order
-- pets (by a counter from a first id, as order.lua), or, when an order placed earlier has been
-- answered and is not canceled yet, POST /v1/store/orders/{id}/cancel on it. So writes are orders
-- placed and canceled in turn, about half each. Order requests carry the beta opt-in.
-- Counts the answers by status and prints them, and the orders asked for, for the bench:
-- "script <status> <count>", "script placed <count>", "script canceled <count>".
-- Arguments (after --): the API key, the number of seeded pets, the first order pet id.
local list, reads, writes, cancels
local count, first
local counter = 0
-- Ids of placed orders waiting for their cancel, oldest first.
local waiting, head, tail = {}, 1, 0
-- Globals: done() reads them from the thread with thread:get.
counts = {}
placed = 0
canceled = 0
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
end

function init(args)
  local auth = "Bearer " .. args[1]
  count = tonumber(args[2])
  first = tonumber(args[3])
  math.randomseed(os.time())
  local host = wrk.headers["Host"]
  reads = { ["Host"] = host, ["Authorization"] = auth }
  list = wrk.format("GET", "/v1/pets?limit=20", { ["Host"] = host, ["Authorization"] = auth })
  writes = {
    ["Host"] = host,
    ["Authorization"] = auth,
    ["Content-Type"] = "application/json",
    ["Animal-Store-Beta"] = "orders",
  }
  cancels = { ["Host"] = host, ["Authorization"] = auth, ["Animal-Store-Beta"] = "orders" }
end

-- Slots 1, 3, 5, 7, 9: list; 2, 4, 6, 8: get; 10: an order placed or canceled.
function request()
  counter = counter + 1
  local slot = counter % 10
  if slot == 0 then
    if head <= tail then
      local id = waiting[head]
      waiting[head] = nil
      head = head + 1
      canceled = canceled + 1
      return wrk.format("POST", "/v1/store/orders/" .. id .. "/cancel", cancels)
    end
    placed = placed + 1
    return wrk.format("POST", "/v1/store/orders", writes, '{"petId":' .. (first + placed - 1) .. "}")
  end
  if slot % 2 == 1 then
    return list
  end
  return wrk.format("GET", "/v1/pets/" .. math.random(1, count), reads)
end

-- Only an order placed answers 201: its id is the first "id" of the body.
function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
  if status == 201 then
    local id = body:match('"id":"([^"]+)"')
    if id then
      tail = tail + 1
      waiting[tail] = id
    end
  end
end

function done()
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("counts")) do
      io.write("script " .. status .. " " .. n .. "\n")
    end
    io.write("script placed " .. thread:get("placed") .. "\n")
    io.write("script canceled " .. thread:get("canceled") .. "\n")
  end
end
