// Metagraphed's own npm client (@jsonbored/metagraphed, vendored in ./metagraphed)
// used against chainproxy the way its README shows.
//
//   node metagraphed_session.mjs <base-url>
//
// Prints one JSON document on stdout with what each call returned, then exits 0;
// exits 1 with the error on stderr if a call that should work throws.
import {
  createMetagraphedClient,
  metagraphedFetch,
  metagraphedPaginate,
  metagraphedRpc,
  MetagraphedError,
} from "./metagraphed/dist/index.js";

const [baseUrl] = process.argv.slice(2);
if (!baseUrl) {
  console.error("usage: node metagraphed_session.mjs <base-url>");
  process.exit(2);
}

// The statuses the server answered, seen through the client's `fetch` option.
const statuses = [];
const countingFetch = async (url, init) => {
  const r = await fetch(url, init);
  statuses.push([new URL(url).pathname, r.status]);
  return r;
};
const client = createMetagraphedClient({ baseUrl, cache: true, fetch: countingFetch });

const ids = (rows) => rows.map((r) => r.id);
const out = {};
out.health = (await client.health()).data.global;
out.endpoints = await client.endpoints({ limit: 2 });
out.all = ids(await client.fetchAll("/api/v1/endpoints", { query: { limit: 2 } }));
out.pages = [];
for await (const page of metagraphedPaginate("/api/v1/endpoints", { baseUrl, query: { limit: 2 } })) {
  out.pages.push(ids(page.data.endpoints));
}
out.providers = (await client.providers()).data.providers;
out.provider = (await client.getProvider(out.providers[0].id)).data.provider;
out.pools = (await client.request("/api/v1/rpc/pools")).data.pools.map((p) => p.id);
out.usage = (await metagraphedFetch("/api/v1/rpc/usage", { baseUrl, query: { window: "7d" } })).data.summary;
out.incidents = (await client.request("/api/v1/endpoint-incidents")).data.summary;
// The client resolves paths against the origin, so the base path goes in the path.
out.downtime = (await client.request("/metagraphed/api/v1/incidents")).data.summary;
out.head = await client.rpc("finney", { method: "chain_getHeader" });
out.hash = await metagraphedRpc("finney", { method: "chain_getBlockHash", params: [1] }, { baseUrl });

// ETag caching: the second read of the same URL is a 304 served from the client's
// cache. The body names the second it was made (generated_at): a pair that straddles
// a second boundary is two 200s, so up to five pairs are tried.
out.etag = null;
for (let i = 0; i < 5 && !(out.etag && out.etag.statuses[1] === 304); i++) {
  statuses.length = 0;
  const first = await client.request("/api/v1/providers");
  const second = await client.request("/api/v1/providers");
  out.etag = { statuses: statuses.map((s) => s[1]), same: JSON.stringify(first) === JSON.stringify(second) };
}

out.errors = {};
for (const [name, path, query] of [
  ["status", "/api/v1/endpoints", { status: "sideways" }],
  ["limit", "/api/v1/endpoints", { limit: 5000 }],
  ["slug", "/api/v1/providers/nobody", undefined],
]) {
  try {
    await client.request(path, { query });
    out.errors[name] = null;
  } catch (e) {
    if (!(e instanceof MetagraphedError)) throw e;
    out.errors[name] = { status: e.status, code: e.code, ok: e.envelope?.ok };
  }
}
try {
  await client.rpc("finney", { method: "author_submitExtrinsic", params: ["0x00"] });
  out.errors.rpc = null;
} catch (e) {
  out.errors.rpc = { name: e.name, status: e.status, code: e.code };
}
console.log(JSON.stringify(out));
