// The comparison server of the load benchmark: a minimal Node.js login endpoint that only
// checks the RS256 signature with node:crypto, keeps keys in memory and has no replay cache,
// no durable storage and no claim checks. keyauth-server does all of those and must still beat it.
'use strict';
const http = require('node:http');
const crypto = require('node:crypto');

const keys = new Map();
const port = Number(process.argv[2] || 8089);

function reply(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString();
    if (req.method === 'POST' && req.url === '/v1/devices') {
      const { public_key: pem } = JSON.parse(body);
      const key = crypto.createPublicKey(pem);
      const jwk = key.export({ format: 'jwk' });
      const canonical = JSON.stringify({ e: jwk.e, kty: 'RSA', n: jwk.n });
      const kid = crypto.createHash('sha256').update(canonical).digest('base64url');
      keys.set(kid, key);
      return reply(res, 201, { kid, status: 'active' });
    }
    if (req.method === 'POST' && req.url === '/oauth/token') {
      const assertion = new URLSearchParams(body).get('assertion') || '';
      const [header, payload, signature] = assertion.split('.');
      const kid = JSON.parse(Buffer.from(header, 'base64url').toString()).kid;
      const key = keys.get(kid);
      const ok = key && crypto.verify('sha256', Buffer.from(header + '.' + payload), key, Buffer.from(signature, 'base64url'));
      if (!ok) return reply(res, 400, { error: 'invalid_grant' });
      return reply(res, 200, { access_token: 'opaque-' + crypto.randomBytes(16).toString('hex'), token_type: 'Bearer', expires_in: 900 });
    }
    reply(res, 404, { error: 'not_found' });
  });
}).listen(port, '127.0.0.1');
