-- POST /v1/messages with a valid NewMessage body. The request never changes, so wrk sends one prebuilt request.
-- Arguments (after --): the API key.
function init(args)
  wrk.method = "POST"
  wrk.body = '{"message":"Biscuit is ready for pick-up"}'
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  wrk.headers["Content-Type"] = "application/json"
end
