/**
 * Ends the holds of placed orders on time, on every instance, whether or not anyone reads them:
 * each instance sweeps every SWEEP_MS, and the database gives each order to one sweep (decision 76).
 */
import fp from 'fastify-plugin'
import { backgroundJob } from '../observability/background.ts'

const SWEEP_MS = 1000

export default fp(
  async (app) => {
    let sweeping = false
    const job = backgroundJob(app.log, 'order expiry sweep')
    const sweep = async () => {
      if (sweeping) return
      sweeping = true
      try {
        await app.store.expireOrders(new Date().toISOString())
        job.worked()
      } catch (err) {
        job.failed(err)
      } finally {
        sweeping = false
      }
    }
    const timer = setInterval(sweep, SWEEP_MS).unref()
    app.addHook('onClose', async () => clearInterval(timer))
  },
  { name: 'order-expiry', dependencies: ['store'] },
)
