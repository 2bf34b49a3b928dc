import { EnvSchema } from './src.ts'

/**
 * The environment of a service process or CLI run: the bench's settings and nothing of the
 * caller's shell that would change the service (a REDIS_URL, WORKERS or RATE_LIMIT left exported
 * would quietly change what is measured).
 */
export function serviceEnv(settings: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env }
  for (const name of Object.keys(EnvSchema.properties)) delete env[name]
  return { ...env, ...settings }
}
