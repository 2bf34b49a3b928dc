/**
 * The check of an endpoint's URL at creation: each refusal says why; private and local hosts only
 * with WEBHOOK_ALLOW_PRIVATE_URLS, plain http only with WEBHOOK_ALLOW_HTTP.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { addressProblem, isIpv4Compatible, webhookUrl, webhookUrlProblem } from '../../src/webhooks/url-policy.ts'

const strict = { allowHttp: false, allowPrivate: false }
const open = { allowHttp: true, allowPrivate: true }

describe('Webhook URL policy', () => {
  it('accepts public https URLs', () => {
    for (const url of [
      'https://example.com/webhooks',
      'https://hooks.example.com:8443/a/b?c=d',
      'https://8.8.8.8/x',
      'https://[2606:4700:4700::1111]/x',
      'https://localhost.example.com/',
      `https://example.com/${'a'.repeat(2048 - 'https://example.com/'.length)}`,
    ]) {
      assert.equal(webhookUrlProblem(url, strict), null, url)
    }
  })

  it('keeps a URL in the parser form events are sent to, within the length limit once in that form', () => {
    assert.deepEqual(webhookUrl('HTTPS:example.com/a/../b', strict), { url: 'https://example.com/b' })
    // 1,000 é are 1,020 characters as typed and 6,020 percent-encoded.
    const encoded = webhookUrl(`https://example.com/${'é'.repeat(1000)}`, strict)
    assert.deepEqual(encoded, { problem: 'The URL is longer than 2048 characters.' })
  })

  const refused: [string, RegExp][] = [
    ['/webhooks', /not an absolute URL/],
    ['example.com/webhooks', /not an absolute URL/],
    [`https://example.com/${'a'.repeat(2049 - 'https://example.com/'.length)}`, /longer than 2048/],
    ['http://example.com/', /must start with https:\/\//],
    ['ftp://example.com/', /must start with https:\/\//],
    ['https://user:pw@example.com/', /username or password/],
    ['https://user@example.com/', /username or password/],
    ['https://example.com:0/', /port 0/],
    // A fragment is never sent: refused, not shown as if it were.
    ['https://example.com/hook#frag', /#fragment: it is never sent/],
    ['https://example.com/hook#', /#fragment/],
    // The parser would drop or encode these: the URL shown would not be the one posted to.
    ['https://example.com/ok\r\nX: y', /spaces or control characters/],
    [' https://example.com/', /spaces or control characters/],
    ['https://example.com/\tx', /spaces or control characters/],
    ['https://127.0.0.1/', /127\.0\.0\.1 is a loopback address/],
    ['https://2130706433/', /127\.0\.0\.1 is a loopback address/],
    ['https://0x7f.1/', /127\.0\.0\.1 is a loopback address/],
    ['https://10.1.2.3/', /a private address/],
    ['https://172.16.0.1/', /a private address/],
    ['https://192.168.1.1/', /a private address/],
    ['https://169.254.169.254/latest/meta-data', /a link-local address/],
    ['https://100.64.0.1/', /carrier-grade NAT/],
    ['https://0.0.0.0/', /the unspecified address/],
    ['https://224.0.0.1/', /a multicast address/],
    ['https://255.255.255.255/', /broadcast/],
    ['https://192.0.2.1/', /reserved/],
    ['https://[::1]/', /::1 is a loopback address/],
    ['https://[::]/', /unspecified/],
    ['https://[fe80::1]/', /a link-local address/],
    ['https://[fd00::1]/', /a unique-local address/],
    ['https://[ff02::1]/', /a multicast address/],
    ['https://[2001:db8::1]/', /reserved/],
    ['https://[::ffff:127.0.0.1]/', /IPv4-mapped/],
    ['https://[::ffff:8.8.8.8]/', /IPv4-mapped/],
    ['https://[::127.0.0.1]/', /IPv4-compatible/],
    ['https://[64:ff9b::7f00:1]/', /special-purpose/],
    ['https://localhost/', /localhost is this machine/],
    ['https://LOCALHOST./', /is this machine/],
    ['https://api.localhost:8080/', /api\.localhost is this machine/],
  ]
  for (const [url, problem] of refused) {
    it(`refuses ${url.slice(0, 60)}`, () => {
      const sentence = webhookUrlProblem(url, strict)
      assert.match(sentence ?? 'accepted', problem)
      assert.match(sentence ?? '', /^The URL.*\.$/)
    })
  }

  it('takes http and private hosts only when allowed', () => {
    assert.equal(webhookUrlProblem('http://example.com/', { allowHttp: true, allowPrivate: false }), null)
    assert.match(webhookUrlProblem('http://127.0.0.1/', { allowHttp: true, allowPrivate: false }) ?? '', /loopback/)
    assert.match(webhookUrlProblem('http://127.0.0.1/', { allowHttp: false, allowPrivate: true }) ?? '', /https/)
    for (const url of ['http://127.0.0.1:3000/hook', 'http://localhost:3000/', 'https://[::1]/', 'https://10.0.0.1/']) {
      assert.equal(webhookUrlProblem(url, open), null, url)
    }
    // Allowing private hosts allows no other fault.
    assert.match(webhookUrlProblem('ftp://127.0.0.1/', open) ?? '', /https:\/\/ or http:\/\//)
    assert.match(webhookUrlProblem('http://a:b@127.0.0.1/', open) ?? '', /username/)
  })

  it('names what is wrong with an address, or null for a public one', () => {
    assert.equal(addressProblem('8.8.8.8'), null)
    assert.equal(addressProblem('2606:4700::1111'), null)
    assert.equal(addressProblem('10.0.0.1'), 'a private address')
    assert.equal(addressProblem('not-an-ip'), 'not an IP address')
    assert.equal(isIpv4Compatible('::7f00:1'), true)
    assert.equal(isIpv4Compatible('::1:0:7f00:1'), false)
    assert.equal(isIpv4Compatible('127.0.0.1'), false)
  })
})
