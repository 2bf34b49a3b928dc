-- Reads and writes as users send them, by a counter (not by chance), so every run has exactly the
-- same mix: of every ten requests, five GET /v1/pets?limit=20, four GET /v1/pets/{id} with a random
-- id of the seeded pets (as get.lua), one POST /v1/pets; interleaved, list and get in turn.
-- Arguments (after --): the API key, the number of seeded pets.
local list, write, reads
local count
local counter = 0

function init(args)
  local auth = "Bearer " .. args[1]
  count = tonumber(args[2])
  math.randomseed(os.time())
  -- wrk.format fills in Host and Content-Length; each request gets its own header table.
  reads = { ["Host"] = wrk.headers["Host"], ["Authorization"] = auth }
  list = wrk.format("GET", "/v1/pets?limit=20", { ["Host"] = wrk.headers["Host"], ["Authorization"] = auth })
  write = wrk.format("POST", "/v1/pets", {
    ["Host"] = wrk.headers["Host"],
    ["Authorization"] = auth,
    ["Content-Type"] = "application/json",
  }, '{"name":"Biscuit","categoryId":3,"status":"available"}')
end

-- Slots 1, 3, 5, 7, 9: list; 2, 4, 6, 8: get; 10: write.
function request()
  counter = counter + 1
  local slot = counter % 10
  if slot == 0 then
    return write
  end
  if slot % 2 == 1 then
    return list
  end
  return wrk.format("GET", "/v1/pets/" .. math.random(1, count), reads)
end
