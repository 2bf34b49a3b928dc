// The typed client quickstart: run with `npx node examples/quickstart.ts` while `npm start` runs,
// after `export API_KEY=…` (a key from the portal or the CLI).
import { allPets, createAnimalStoreClient, unwrap } from 'animal-store/client'

// biome-ignore lint/style/noProcessEnv: an example takes its key and address from the environment
const baseUrl = process.env.ANIMAL_STORE_URL ?? 'http://127.0.0.1:8080/v1'
// biome-ignore lint/style/noProcessEnv: as above
const apiKey = process.env.API_KEY
if (!apiKey) {
  // Every call would fail with 401 missing_api_key: say what to set instead.
  console.error(`Set API_KEY to one of your keys, from the portal (${new URL('/portal', baseUrl)}) or from`)
  console.error('"npx animal-store keys create you@example.com": export API_KEY=as_test_…')
  process.exit(1)
}
const client = createAnimalStoreClient({ baseUrl, apiKey })

// Add animals (createPet): the body is checked against NewPet by the compiler.
const rex = unwrap(await client.POST('/pets', { body: { name: 'Rex', categoryId: 1 } }))
console.log('created', rex)
unwrap(await client.POST('/pets', { body: { name: 'Tom', categoryId: 2, status: 'sold' } }))

// List one page (listPets), filtered by status.
const sold = unwrap(await client.GET('/pets', { params: { query: { status: 'sold', limit: 10 } } }))
console.log('sold', sold)

// Fetch one animal (getPet, deprecated: the Sunset header says until when it works).
const { data: pet, response } = await client.GET('/pets/{petId}', { params: { path: { petId: rex.id } } })
console.log('fetched', pet, 'sunset', response.headers.get('sunset'))

// Send a message (sendMessage): 202, queued.
const message = unwrap(await client.POST('/messages', { body: { message: 'Hello from the typed client' } }))
console.log('message', message.status, message.id)

// Walk every page: allPets follows each page's Link: <…>; rel="next" header.
let count = 0
for await (const animal of allPets(client, { limit: 1 })) {
  console.log('page item', animal.id, animal.name)
  count++
}
console.log('walked', count, 'animals')
