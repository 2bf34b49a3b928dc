import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { clientNetwork } from '../../src/plugins/rate-limit-counters.ts'

describe('clientNetwork: the client a per-address limit counts', () => {
  it('is an IPv4 address itself, and an IPv6 address its /64, however it is written', () => {
    const cases: [string, string][] = [
      ['203.0.113.7', '203.0.113.7'],
      ['::ffff:203.0.113.7', '203.0.113.7'],
      ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
      ['2001:0DB8:0001:0002:ffff:0:0:1', '2001:db8:1:2::/64'],
      ['2001:db8:1:2:3:4:192.0.2.1', '2001:db8:1:2::/64'],
      ['2001:db8::1', '2001:db8:0:0::/64'],
      ['fe80::1%eth0', 'fe80:0:0:0::/64'],
      ['::1', '0:0:0:0::/64'],
    ]
    for (const [address, network] of cases) assert.equal(clientNetwork(address), network, address)
  })
})
