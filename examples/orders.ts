// Orders (beta) with the typed client: run with `npx node examples/orders.ts` while `npm start`
// runs, after `export API_KEY=…`. The client sends `Animal-Store-Beta: orders` for these calls itself.
import { allOrders, createAnimalStoreClient, unwrap } from 'animal-store/client'

// biome-ignore lint/style/noProcessEnv: an example takes its key and address from the environment
const baseUrl = process.env.ANIMAL_STORE_URL ?? 'http://127.0.0.1:8080/v1'
// biome-ignore lint/style/noProcessEnv: as above
const apiKey = process.env.API_KEY
if (!apiKey) {
  console.error('Set API_KEY to one of your keys first, as for examples/quickstart.ts: export API_KEY=as_test_…')
  process.exit(1)
}
const client = createAnimalStoreClient({ baseUrl, apiKey })

// Two animals to order.
const rex = unwrap(await client.POST('/pets', { body: { name: 'Rex', categoryId: 1 } }))
const tom = unwrap(await client.POST('/pets', { body: { name: 'Tom', categoryId: 2 } }))

// Place an order (placeOrder): Rex is held (pending) until it is completed, canceled or expires.
const order = unwrap(await client.POST('/store/orders', { body: { petId: rex.id } }))
console.log('placed', order.id, 'for pet', order.petId, 'until', order.expiresAt)

// Rex is held: a second order for him is refused (409 pet_not_available).
const again = await client.POST('/store/orders', { body: { petId: rex.id } })
console.log('again', again.response.status, again.error?.code)

// List your placed orders (listOrders), newest first.
const placed = unwrap(await client.GET('/store/orders', { params: { query: { status: 'placed' } } }))
console.log('placed orders', placed.length)

// Complete it (completeOrder): Rex is sold.
const completed = unwrap(
  await client.POST('/store/orders/{orderId}/complete', { params: { path: { orderId: order.id } } }),
)
console.log('completed', completed.status)

// Order Tom, then cancel (cancelOrder): Tom is available again. getInventory counts by status.
const second = unwrap(await client.POST('/store/orders', { body: { petId: tom.id } }))
console.log('inventory', unwrap(await client.GET('/store/inventory')))
const canceled = unwrap(
  await client.POST('/store/orders/{orderId}/cancel', { params: { path: { orderId: second.id } } }),
)
console.log('canceled', canceled.status)
console.log('inventory', unwrap(await client.GET('/store/inventory')))

// Walk all your orders: allOrders follows each page's Link: <…>; rel="next" header.
for await (const each of allOrders(client, { limit: 1 })) console.log('order', each.id, each.petId, each.status)
