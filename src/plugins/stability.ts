/**
 * Beta and experimental operations (decision 75). A route names its level and feature in
 * `config.stability`. A beta operation is offered, and a client opts in per request with
 * `Animal-Store-Beta: <feature>`: without it, 400 naming the header. An experimental one exists
 * only where the operator lists its feature in EXPERIMENTAL_FEATURES (its module asks `offers`);
 * elsewhere it is no route at all, absent from the document. Both are marked `x-stability`.
 */
import type { onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { type Config, EXPERIMENTAL_FEATURE_NAMES } from '../config.ts'
import { ApiError } from '../errors.ts'

export type Stability = { level: 'beta' | 'experimental'; feature: string }

export const BETA_HEADER = 'animal-store-beta'

declare module 'fastify' {
  interface FastifyContextConfig {
    stability?: Stability
  }
  interface FastifyInstance {
    /** Whether an operation of this level and feature exists on this deployment. */
    offers(stability: Stability): boolean
  }
}

/** Whether the header (a comma-separated list, sent once or more) names the feature. */
function optedIn(header: string | string[] | undefined, feature: string): boolean {
  if (header === undefined) return false
  return [header].flat().some((value) => value.split(',').some((name) => name.trim().toLowerCase() === feature))
}

export default fp<{ config: Config }>(
  async (app, { config }) => {
    app.decorate('offers', ({ level, feature }: Stability) => {
      return level === 'beta' || config.experimentalFeatures.includes(feature)
    })

    app.addHook('onRoute', (route) => {
      const stability = route.config?.stability
      if (!stability) return
      if (stability.level === 'experimental' && !EXPERIMENTAL_FEATURE_NAMES.includes(stability.feature)) {
        throw new Error(`Experimental feature "${stability.feature}" is missing from EXPERIMENTAL_FEATURE_NAMES`)
      }
      const badge = stability.level === 'beta' ? '**Beta**' : '**Experimental**'
      route.schema = {
        ...route.schema,
        'x-stability': stability.level,
        description:
          `${badge}: send \`Animal-Store-Beta: ${stability.feature}\`; it may still change (see the compatibility policy). ${route.schema?.description ?? ''}`.trim(),
      } as typeof route.schema
      // After the key check and the rate limit (the route's plugin hooks run first).
      const optIn: onRequestHookHandler = (request, _reply, done) => {
        if (optedIn(request.headers[BETA_HEADER], stability.feature)) return done()
        done(
          new ApiError(
            'beta_opt_in_required',
            `This operation is ${stability.level === 'beta' ? 'in beta' : 'experimental'}: send the header "Animal-Store-Beta: ${stability.feature}" to use it.`,
          ),
        )
      }
      route.onRequest = [...[route.onRequest ?? []].flat(), optIn]
    })
  },
  { name: 'stability' },
)
