// The OpenID Provider of the tests: oidc-provider (an OpenID Certified implementation) on loopback,
// configured by a JSON file the test writes (tests/support/oidc_provider.py):
//   node provider.mjs CONFIG.json
// It prints "listening <issuer>" once it accepts connections. Beside the provider it serves:
//   GET  /interaction/:uid        the sign-in page (user name and password from the config's users)
//   POST /interaction/:uid/login  the sign-in form's target
//   GET  /test/stats              {"jwks_fetches": N}: how often its JWKS was read since it started
// Consent is implied (every client is first-party), so a sign-in goes straight back to the client.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const users = config.users || {};
const claimNames = { org: 'org', permissions: 'permissions', ...(config.claim_names || {}) };
let jwksFetches = 0;

function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

async function findAccount(_ctx, id) {
  const user = users[id];
  if (!user) return undefined;
  return {
    accountId: id,
    async claims() {
      return { sub: id, name: user.name || id, preferred_username: id, email: user.email || `${id}@example.test` };
    },
  };
}

// The grant a first-party client gets without a consent screen: whatever it asked for.
async function loadExistingGrant(ctx) {
  const { oidc } = ctx;
  const grantId = oidc.result?.consent?.grantId || oidc.session.grantIdFor(oidc.client.clientId);
  let grant = grantId ? await oidc.provider.Grant.find(grantId) : undefined;
  if (!grant) {
    grant = new oidc.provider.Grant({ clientId: oidc.client.clientId, accountId: oidc.session.accountId });
  }
  grant.addOIDCScope([...oidc.requestParamOIDCScopes].join(' '));
  for (const [indicator, server] of Object.entries(oidc.resourceServers || {})) {
    grant.addResourceScope(indicator, server.scope || '');
  }
  await grant.save();
  return grant;
}

function resourceServer(indicator, client) {
  const resource = (config.resources || {})[indicator];
  if (!resource) return undefined;
  const alg = (config.client_algs || {})[client.clientId] || 'RS256';
  return {
    audience: resource.audience,
    scope: resource.scope || '',
    accessTokenTTL: resource.ttl || 300,
    accessTokenFormat: 'jwt',
    jwt: { sign: { alg } },
  };
}

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: { keys: config.keys },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  findAccount,
  loadExistingGrant,
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  claims: { openid: ['sub'], profile: ['name', 'preferred_username'], email: ['email'] },
  scopes: ['openid', 'offline_access', 'profile', 'email', 'chat', 'agent'],
  pkce: { required: () => true },
  // Access tokens live as long as their resource server says (the chat's is configurable).
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL || 300,
    ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL || 300,
    AuthorizationCode: 60, IdToken: 300, Interaction: 600, Grant: 3600, Session: 3600, RefreshToken: 3600,
  },
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  // Every refresh token is used once (as many providers do): a client must keep the new one.
  rotateRefreshToken: () => true,
  async extraTokenClaims(_ctx, token) {
    const user = token.accountId ? users[token.accountId] : undefined;
    if (!user) return undefined;
    const claims = {};
    if (user.org) claims[claimNames.org] = user.org;
    if (user.permissions) claims[claimNames.permissions] = user.permissions;
    return claims;
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    revocation: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, client, oneOf) => oneOf || (config.default_resource || {})[client.clientId],
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, indicator, client) => {
        const server = resourceServer(indicator, client);
        if (!server) throw new Provider.errors.InvalidTarget();
        return server;
      },
    },
  },
});
provider.proxy = false;

function readForm(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk) => {
      body += chunk;
      if (body.length > 16384) reject(new Error('form too large'));
    });
    req.on('end', () => resolve(new URLSearchParams(body)));
    req.on('error', reject);
  });
}

function loginPage(res, uid, error) {
  res.statusCode = error ? 401 : 200;
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  res.setHeader('Cache-Control', 'no-store');
  res.end(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Test IdP: sign in</title></head>
<body><main><h1>Test IdP</h1>${error ? `<p role="alert">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${escapeHtml(uid)}/login">
<label>User name <input name="username" autocomplete="username" required></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button></form></main></body></html>`);
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  if (action === 'login' && req.method === 'POST') {
    const form = await readForm(req);
    const username = form.get('username') || '';
    const user = users[username];
    if (!user || user.password !== form.get('password')) {
      loginPage(res, uid, 'Unknown user name or wrong password.');
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: username } }, { mergeWithLastSubmission: false });
    return;
  }
  if (details.prompt.name === 'login') {
    loginPage(res, uid);
    return;
  }
  // Any other prompt (consent): first-party clients are granted what they asked for.
  await provider.interactionFinished(req, res, { consent: {} }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
const server = http.createServer(async (req, res) => {
  const { pathname } = new URL(req.url, config.issuer);
  try {
    const match = pathname.match(/^\/interaction\/([\w-]+)(?:\/(login))?$/);
    if (match) {
      await interaction(req, res, match[1], match[2]);
      return;
    }
    if (pathname === '/test/stats') {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ jwks_fetches: jwksFetches }));
      return;
    }
    if (pathname === '/jwks') jwksFetches += 1;
    callback(req, res);
  } catch (err) {
    res.statusCode = 400;
    res.setHeader('Content-Type', 'text/plain');
    res.end(`interaction failed: ${err.message}`);
  }
});
server.listen(config.port, '127.0.0.1', () => {
  console.log(`listening ${config.issuer}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
