// polkadot-api (PAPI) 2.2.2 following the chain over Substrate's new JSON-RPC spec
// (chainHead_v1_*, chainSpec_v1_*), as an app does: createClient(getWsProvider(url))
// from "polkadot-api/ws" (the provider apps use; it speaks chainHead_v1 when the
// server's rpc_methods lists it, which the summary's wire counts prove), no
// descriptors: client.getUnsafeApi().
//
//   node papi_session.mjs follow <ws-url> <source-ip> [--drive <node-http-url> [--pause]]
//
// Output lines "@@ {json}":
//   {"step": "ready", ...answers}: rpc_methods, the chain spec, the metadata
//     (length, sha256), System.Number, System.Account(Alice), Timestamp.Now,
//     System.SS58Prefix and two runtime-API calls, Core_version and
//     AccountNonceApi_account_nonce(Alice) (raw hex and decoded), all at the
//     finalized block ("at"). The runtime's metadata is v14 (no runtime-API section, so no
//     api.apis.*): the calls go through the client's own chainHead_v1_call path
//     (client.___INTERNAL_DO_NOT_USE.call$, what api.apis.* would use);
//   {"step": "block", "kind": "finalized"|"best"|"new", "number", "hash"}: every
//     emission of client.finalizedBlock$, every new best block of bestBlocks$ (its
//     first element) and every block of blocks$ (each block the client discovers);
//   stdin "query": {"step": "answers", ...} again, at the finalized block then;
//   stdin "stop": {"step": "summary"} (the streams, the provider's socket events
//     and status changes, what went over the wire: methods sent, follow events by
//     type, every JSON-RPC error and `stop` event, PAPI's console warnings), then
//     {"step": "done"}; {"step": "error", "message"} and exit code 1 on a failure.
// Lines "# <ms> out|in|socket <message, strings cut to 80 characters>": the wire,
// for the log of a failed test.
//
// --drive <node-http-url>: run on its own, straight against a chopsticks node
// (the harness' sanity check): it makes blocks itself (dev_newBlock at that URL,
// one at a time, each awaited on both streams), prints {"step": "ready-to-kill"}
// after 2 (with --pause it waits there for a line on stdin: time to stop an
// endpoint by hand), makes 3 more, queries again and stops.
import { createHash } from "node:crypto";
import { createInterface } from "node:readline";
import WS from "ws";
import { Struct, str, u32 } from "@polkadot-api/substrate-bindings";
import { createClient } from "polkadot-api";
import { firstValueFrom } from "rxjs";
import { getWsProvider } from "polkadot-api/ws";

const [scenario, url, sourceIp, ...rest] = process.argv.slice(2);
const driveAt = rest.indexOf("--drive");
const driveUrl = driveAt >= 0 ? rest[driveAt + 1] : null;
const pause = rest.includes("--pause");
if (scenario !== "follow" || !url || !sourceIp || (driveAt >= 0 && !driveUrl)) {
  console.error(
    "usage: node papi_session.mjs follow <ws-url> <source-ip> [--drive <node-http-url> [--pause]]",
  );
  process.exit(2);
}

const ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY";
const t0 = Date.now();

const plain = (_key, v) => {
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Uint8Array) return "0x" + Buffer.from(v).toString("hex");
  if (v && typeof v === "object" && typeof v.asHex === "function") return v.asHex(); // Binary
  return v;
};
const emit = (doc) => console.log("@@ " + JSON.stringify(doc, plain));

// --- what went over the wire ---------------------------------------------------------------

const wire = {
  sockets: 0, // sockets the provider opened
  socketEvents: [], // the provider's socket events other than IN/OUT, in order
  statuses: [], // onStatusChanged, in order
  sent: {}, // method -> count
  followEvents: {}, // chainHead_v1_followEvent result.event -> count
  stops: [], // follow events "stop"
  errors: [], // JSON-RPC error answers: {method, error}
  operationErrors: [], // operationError follow events' messages (PAPI probes
  // Metadata_metadata_versions first: a runtime without it answers one)
  finalizedHashes: [], // every hash of every "finalized" event's finalizedBlockHashes
  warnings: [], // PAPI's console.warn / console.error
};
const methodOf = new Map(); // request id -> method

// A line "# ..." (not a step) for each message sent and each one received but
// the payloads: what the wire looked like when a session hangs.
const brief = (m) =>
  JSON.stringify(m, (_k, v) => (typeof v === "string" && v.length > 80 ? v.slice(0, 80) + "…" : v)).slice(0, 400);
const trace = (dir, m) => console.log(`# ${Date.now() - t0}ms ${dir} ${brief(m)}`);

function logger(event) {
  if (event.type === "OUT") {
    for (const m of [JSON.parse(event.msg)].flat()) {
      trace("out", m);
      if (m.method) wire.sent[m.method] = (wire.sent[m.method] || 0) + 1;
      if (m.id !== undefined) methodOf.set(m.id, m.method);
    }
  } else if (event.type === "IN") {
    for (const m of [JSON.parse(event.msg)].flat()) {
      trace("in", m);
      if (m.error !== undefined) wire.errors.push({ method: methodOf.get(m.id), error: m.error });
      if (m.method !== "chainHead_v1_followEvent") continue;
      const ev = m.params.result;
      wire.followEvents[ev.event] = (wire.followEvents[ev.event] || 0) + 1;
      if (ev.event === "stop") wire.stops.push({ at: Date.now() - t0 });
      if (ev.event === "operationError") wire.operationErrors.push(ev.error);
      if (ev.event === "finalized") wire.finalizedHashes.push(...ev.finalizedBlockHashes);
    }
  } else {
    if (event.type === "CONNECTING") wire.sockets++;
    const doc = { type: event.type, at: Date.now() - t0, error: event.error && String(event.error.message || event.error.type || event.error) };
    wire.socketEvents.push(doc);
    trace("socket", doc);
  }
}

for (const level of ["warn", "error"]) {
  const original = console[level];
  console[level] = (...args) => {
    wire.warnings.push(args.map((a) => String(a && a.message ? a.message : a)).join(" "));
    original(...args);
  };
}

// `ws` leaving from <source-ip> (the test's own rate-limit identity): Node 20 has no
// global WebSocket.
class BoundWebSocket extends WS {
  constructor(address, protocols, options) {
    super(address, protocols, { ...(options || {}), localAddress: sourceIp });
  }
}

const provider = getWsProvider(url, {
  websocketClass: BoundWebSocket,
  logger,
  onStatusChanged: (s) => wire.statuses.push({ type: s.type, at: Date.now() - t0 }),
});
const client = createClient(provider);

// --- the streams -----------------------------------------------------------------------------

const streams = { finalized: [], best: [], new: [] };
const streamEnds = []; // an error or completion of any stream
const bestUnion = new Map(); // number -> hash, of every element of every bestBlocks$ array
const waiters = [];

function saw(kind, block) {
  const entry = { number: block.number, hash: block.hash };
  streams[kind].push(entry);
  emit({ step: "block", kind, ...entry });
  for (const w of [...waiters]) w();
}

function watch(kind, observable, pick) {
  observable.subscribe({
    next: (v) => saw(kind, pick(v)),
    error: (e) => streamEnds.push({ kind, error: String(e && e.message ? e.message : e) }),
    complete: () => streamEnds.push({ kind, complete: true }),
  });
}
watch("finalized", client.finalizedBlock$, (b) => b);
// bestBlocks$ emits when the best or the finalized block changes: only a new best
// block (its first element) is recorded
let bestHead = null;
client.bestBlocks$.subscribe({
  next: (blocks) => {
    for (const b of blocks) bestUnion.set(b.number, b.hash);
    if (blocks[0].hash !== bestHead) saw("best", blocks[0]);
    bestHead = blocks[0].hash;
  },
  error: (e) => streamEnds.push({ kind: "best", error: String(e && e.message ? e.message : e) }),
  complete: () => streamEnds.push({ kind: "best", complete: true }),
});
watch("new", client.blocks$, (b) => b);

const last = (kind) => (streams[kind].length ? streams[kind].at(-1).number : -1);

function seen(number, timeoutMs = 60000) {
  // both the finalized and the best stream at `number` or above
  return new Promise((resolve, reject) => {
    const check = () => {
      if (last("finalized") >= number && last("best") >= number) {
        waiters.splice(waiters.indexOf(check), 1);
        clearTimeout(timer);
        resolve();
      }
    };
    const timer = setTimeout(() => {
      waiters.splice(waiters.indexOf(check), 1);
      reject(new Error(`block #${number} not seen in ${timeoutMs} ms: ${JSON.stringify(streams)}`));
    }, timeoutMs);
    waiters.push(check);
    check();
  });
}

// --- answers -----------------------------------------------------------------------------------

// the head of sp_version::RuntimeVersion (the rest is not decoded)
const RuntimeVersionHead = Struct({ specName: str, implName: str, authoringVersion: u32, specVersion: u32 });
const ALICE_PUBLIC = "0xd43593c715fdd31c61141abd04a99fd6822c8558854ccde39a5684e7a56da27d";

async function runtimeCall(at, fn, args = "0x") {
  return firstValueFrom(client.___INTERNAL_DO_NOT_USE.call$(at, fn, args));
}

async function answers() {
  const api = client.getUnsafeApi();
  const finalized = await client.getFinalizedBlock();
  const at = finalized.hash;
  const [metadata, number, account, now, ss58Prefix, coreVersionHex, aliceNonceHex] =
    await Promise.all([
      client.getMetadata(at),
      api.query.System.Number.getValue({ at }),
      api.query.System.Account.getValue(ALICE, { at }),
      api.query.Timestamp.Now.getValue({ at }),
      api.constants.System.SS58Prefix({ at }),
      runtimeCall(at, "Core_version"),
      runtimeCall(at, "AccountNonceApi_account_nonce", ALICE_PUBLIC),
    ]);
  return {
    at,
    atNumber: finalized.number,
    metadataLength: metadata.length,
    metadataSha256: createHash("sha256").update(metadata).digest("hex"),
    systemNumber: number,
    aliceAccount: account,
    timestampNow: now,
    ss58Prefix,
    coreVersionHex,
    coreVersion: RuntimeVersionHead.dec(coreVersionHex),
    aliceNonceHex,
    aliceNonce: u32.dec(aliceNonceHex),
  };
}

async function ready() {
  const methods = (await client._request("rpc_methods", [])).methods;
  const chainSpec = await client.getChainSpecData();
  emit({
    step: "ready",
    chainHeadListed: methods.includes("chainHead_v1_follow"),
    chainSpec,
    ...(await answers()),
  });
}

function summary() {
  const ms = Date.now() - t0;
  emit({
    step: "summary",
    ms,
    streams,
    bestUnion: [...bestUnion.entries()].sort((a, b) => a[0] - b[0]),
    streamEnds,
    ...wire,
  });
}

// --- driving ------------------------------------------------------------------------------------

async function devNewBlock() {
  const r = await fetch(driveUrl, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "dev_newBlock", params: [{ count: 1 }] }),
  });
  const doc = await r.json();
  if (doc.error) throw new Error(`dev_newBlock: ${JSON.stringify(doc.error)}`);
  const head = await fetch(driveUrl, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "chain_getHeader", params: [] }),
  });
  return parseInt((await head.json()).result.number, 16);
}

async function drive() {
  await ready();
  for (let i = 0; i < 2; i++) await seen(await devNewBlock());
  emit({ step: "ready-to-kill", best: last("best"), ms: Date.now() - t0 });
  if (pause) await nextLine();
  for (let i = 0; i < 3; i++) await seen(await devNewBlock());
  emit({ step: "answers", ...(await answers()) });
  summary();
}

const lines = createInterface({ input: process.stdin });
const queued = [];
const lineWaiters = [];
lines.on("line", (l) => {
  const w = lineWaiters.shift();
  if (w) w(l.trim());
  else queued.push(l.trim());
});
const nextLine = () =>
  queued.length ? Promise.resolve(queued.shift()) : new Promise((r) => lineWaiters.push(r));

async function follow() {
  await ready();
  for (;;) {
    const line = await nextLine();
    if (line === "query") emit({ step: "answers", ...(await answers()) });
    else if (line === "stop") break;
  }
  summary();
}

try {
  await (driveUrl ? drive() : follow());
  lines.close();
  client.destroy();
  emit({ step: "done" });
  process.exit(0);
} catch (e) {
  emit({ step: "error", message: String(e && e.stack ? e.stack : e) });
  process.exit(1);
}
