#!/usr/bin/env node
/**
 * `npx animal-store …`: src/cli.ts, with Node's compile cache, as `npm start` runs the server
 * (the same folder, unless NODE_COMPILE_CACHE names another). Without it each run strips the
 * types of every module and compiles it again: most of a run's time.
 */
import { enableCompileCache } from 'node:module'
import { fileURLToPath } from 'node:url'

enableCompileCache(fileURLToPath(new URL('../node_modules/.cache/node-compile-cache', import.meta.url)))
// Imported once the cache is on (a static import would be loaded before it).
const { main } = await import('../src/cli.ts')
process.exitCode = await main(process.argv.slice(2))
