-- POST with a fixed JSON body: the request never changes, so wrk sends one prebuilt request.
-- Arguments (after --): the API key, the body (bench/measure.ts: a NewPet, a NewMessage).
function init(args)
  wrk.method = "POST"
  wrk.body = args[2]
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  wrk.headers["Content-Type"] = "application/json"
end
