-- 90/10 read/write mix: nine GET /v1/pets?limit=20 then one POST /v1/pets, by a counter (not by
-- chance), so every run has exactly the same mix.
-- Arguments (after --): the API key.
local read, write
local counter = 0

function init(args)
  local auth = "Bearer " .. args[1]
  -- wrk.format fills in Host and Content-Length; each request gets its own header table.
  read = wrk.format("GET", "/v1/pets?limit=20", { ["Host"] = wrk.headers["Host"], ["Authorization"] = auth })
  write = wrk.format("POST", "/v1/pets", {
    ["Host"] = wrk.headers["Host"],
    ["Authorization"] = auth,
    ["Content-Type"] = "application/json",
  }, '{"name":"Biscuit","categoryId":3,"status":"available"}')
end

function request()
  counter = counter + 1
  if counter % 10 == 0 then
    return write
  end
  return read
end
