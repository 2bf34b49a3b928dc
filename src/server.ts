/**
 * The process: reads the configuration, starts the app, listens, and shuts down cleanly on
 * SIGTERM/SIGINT (stop accepting, finish in-flight requests, close the database).
 */
import closeWithGrace from 'close-with-grace'
import Fastify from 'fastify'
import animalStore, { serverOptions } from './app.ts'
import { ConfigError, loadConfig } from './config.ts'

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>
  try {
    config = loadConfig()
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    console.error(error.message)
    process.exit(1)
  }

  const app = Fastify(serverOptions(config))
  await app.register(animalStore, { config })

  closeWithGrace({ delay: config.shutdownTimeoutMs, logger: app.log }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an uncaught error')
    else app.log.info({ signal }, 'shutting down')
    await app.close()
  })

  await app.listen({ port: config.port, host: config.host })
  app.server.maxConnections = config.maxConnections
}

await main()
