-- POST /v1/pets with a valid NewPet body. The request never changes, so wrk sends one prebuilt request.
-- Arguments (after --): the API key.
function init(args)
  wrk.method = "POST"
  wrk.body = '{"name":"Biscuit","categoryId":3,"status":"available"}'
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  wrk.headers["Content-Type"] = "application/json"
end
