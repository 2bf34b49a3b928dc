-- GET /v1/pets/{id} with a random id of the seeded pets, so reads are not all one cached row.
-- Arguments (after --): the API key, the number of seeded pets.
local count

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  count = tonumber(args[2])
  math.randomseed(os.time())
end

function request()
  return wrk.format("GET", "/v1/pets/" .. math.random(1, count))
end
