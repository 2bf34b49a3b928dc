-- GET each path of a file in turn (one per line), round and round: with more distinct paths than
-- the service's page cache holds, a path comes back only after it has been evicted.
-- Arguments (after --): the API key, the file of paths.
local paths = {}
local i = 0

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  for line in io.lines(args[2]) do
    paths[#paths + 1] = line
  end
  if #paths == 0 then
    error("no paths in " .. args[2])
  end
end

function request()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
