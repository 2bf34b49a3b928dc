/**
 * The start of a graceful shutdown, per HTTP server. At the signal the server goes on serving for a
 * moment (src/server.ts: what the kernel already holds is taken in), but from then on every answer
 * closes its connection and `/readyz` fails, so that clients and balancers stop sending on
 * connections the shutdown is about to close: a request sent on one just as it closes is reset,
 * and its client cannot tell whether it was served.
 */
import type { Server } from 'node:http'

const draining = new WeakSet<Server>()
const listeners = new WeakMap<Server, (() => void)[]>()

/** Called at the shutdown signal. */
export function startDraining(server: Server): void {
  if (draining.has(server)) return
  draining.add(server)
  for (const listener of listeners.get(server) ?? []) listener()
}

export function isDraining(server: Server): boolean {
  return draining.has(server)
}

export function onDraining(server: Server, listener: () => void): void {
  listeners.set(server, [...(listeners.get(server) ?? []), listener])
}
