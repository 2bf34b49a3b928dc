/**
 * `npm run lint:openapi`: lints the OpenAPI document exactly as the app serves it (built in-process,
 * as for the typed client) with Redocly CLI's `recommended-strict` rules: its recommended rules
 * with every warning raised to an error, so that any problem fails CI (decision 68).
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { servedDocument } from './generate-client.ts'
import { ROOT } from './start-command.ts'

const REDOCLY = join(ROOT, 'node_modules/@redocly/cli/bin/cli.js')

const dir = mkdtempSync(join(tmpdir(), 'animal-store-openapi-'))
try {
  const file = join(dir, 'openapi.json')
  writeFileSync(file, await servedDocument())
  const run = spawnSync(process.execPath, [REDOCLY, 'lint', '--extends', 'recommended-strict', file], {
    cwd: dir,
    stdio: 'inherit',
    // CI has no network: no usage report, no check for a newer version.
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
  })
  process.exitCode = run.status ?? 1
} finally {
  rmSync(dir, { recursive: true, force: true })
}
