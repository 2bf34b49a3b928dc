// A webhook receiver for the quickstarts: run with `npx node examples/webhook-receiver.ts` after
// `export WEBHOOK_SECRET=whsec_…` (the secret shown when the endpoint was created, or the one
// `npx animal-store listen --print-secret` prints for the events listen forwards). It checks
// each delivery's signature with the standardwebhooks package, prints the event, and answers 204.
// With `--once` it exits after the first delivery it verified.
import http from 'node:http'
import { Webhook } from 'standardwebhooks'

// biome-ignore lint/style/noProcessEnv: an example takes its secret and port from the environment
const secret = process.env.WEBHOOK_SECRET
// biome-ignore lint/style/noProcessEnv: as above
const port = Number(process.env.RECEIVER_PORT ?? 4000)
// Not a secret (the endpoint was not created, say): every delivery would be refused, silently.
if (!secret?.startsWith('whsec_')) {
  console.error(
    `WEBHOOK_SECRET must be the endpoint’s secret or listen’s (whsec_…), not ${JSON.stringify(secret ?? '')}: export WEBHOOK_SECRET=whsec_…`,
  )
  process.exit(1)
}
const webhook = new Webhook(secret)
const once = process.argv.includes('--once')

const server = http
  .createServer((request, response) => {
    // Anything but a delivery (a check that it listens, say) is not one to verify.
    if (request.method !== 'POST') {
      response.writeHead(405).end()
      return
    }
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString()
      try {
        // Throws unless the signature is the secret's and the timestamp is recent (replays fail).
        const event = webhook.verify(body, request.headers as Record<string, string>) as {
          type: string
          data: { id: string; message?: string }
        }
        console.log(`verified ${event.type} ${request.headers['webhook-id']}: ${event.data.message ?? event.data.id}`)
        response.writeHead(204).end()
        if (once) server.close()
      } catch (error) {
        // The usual cause: the secret of another sender (an endpoint's, listen's) in WEBHOOK_SECRET.
        const hint = /signature/i.test((error as Error).message)
          ? ' (is WEBHOOK_SECRET the secret of what sends here? listen: `animal-store listen --print-secret`;' +
            ' an endpoint: the `secret` its creation answered)'
          : ''
        console.log(`refused a delivery: ${(error as Error).message}${hint}`)
        response.writeHead(400).end()
      }
    })
  })
  .listen(port, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${port}/hook`))
// No connection kept alive past the answer: --once ends as soon as the delivery is answered.
server.keepAliveTimeout = 1
