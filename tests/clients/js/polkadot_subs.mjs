// polkadot.js (@polkadot/api, WsProvider) following the chain through chainproxy's
// WebSocket, as an app does.
//
//   node polkadot_subs.mjs <scenario> <ws-url> <source-ip>
//
// "heads": ApiPromise.create over WsProvider (it subscribes to state_subscribeRuntimeVersion),
// api.query.system.number(), then api.rpc.chain.subscribeNewHeads and
// subscribeFinalizedHeads. Output lines "@@ {json}": {"step": "ready"}, then one
// {"step": "head", "kind": "new"|"finalized", ...} per header the client gets, until a
// line "stop" on stdin: it unsubscribes and prints {"step": "summary"} (the sockets
// the provider opened and lost, the (un)subscribe calls it sent, the subscription
// ids on the wire), then {"step": "done"}
// (or {"step": "error", "message": ...}, exit code 1).
// "runtime": api.rpc.state.subscribeRuntimeVersion; a node answers with the current
// version at once: {"step": "runtime"} says whether it came within 10 s.
import { createInterface } from "node:readline";
import WS from "ws";

const [scenario, url, sourceIp] = process.argv.slice(2);
if (!["heads", "runtime"].includes(scenario) || !url || !sourceIp) {
  console.error("usage: node polkadot_subs.mjs heads|runtime <ws-url> <source-ip>");
  process.exit(2);
}
const emit = (doc) => console.log("@@ " + JSON.stringify(doc));

// What the provider's sockets saw: opened, closed (before we disconnect), and the
// subscription id of every notification, by method.
const wire = { opened: 0, closed: 0, errors: [], sent: {}, subscriptions: {}, notifications: {} };

// @polkadot/x-ws takes globalThis.WebSocket when there is one (else the `ws`
// package): this one is `ws` leaving from <source-ip> (the test's own rate-limit
// identity) and recording what arrives. Set before @polkadot/api is loaded.
class BoundWebSocket extends WS {
  constructor(address, protocols, options) {
    super(address, protocols, { ...(options || {}), localAddress: sourceIp });
    wire.opened++;
    this.on("close", () => { wire.closed++; });
    this.on("error", (e) => { wire.errors.push(String(e.message || e)); });
    this.on("message", (data) => {
      let doc;
      try {
        doc = JSON.parse(String(data));
      } catch {
        return;
      }
      for (const m of Array.isArray(doc) ? doc : [doc]) {
        const sub = m && m.params && m.params.subscription;
        if (m && m.method && sub !== undefined) {
          (wire.subscriptions[m.method] ||= []).includes(sub) || wire.subscriptions[m.method].push(sub);
          wire.notifications[m.method] = (wire.notifications[m.method] || 0) + 1;
        }
      }
    });
  }

  send(data, ...rest) {
    try {
      const doc = JSON.parse(String(data));
      for (const m of Array.isArray(doc) ? doc : [doc]) {
        if (/ubscribe/.test(m.method)) wire.sent[m.method] = (wire.sent[m.method] || 0) + 1;
      }
    } catch {
      // not JSON: nothing to count
    }
    return super.send(data, ...rest);
  }
}
globalThis.WebSocket = BoundWebSocket;
const { ApiPromise, WsProvider } = await import("@polkadot/api");

const header = (kind, h) => ({
  step: "head",
  kind,
  number: h.number.toNumber(),
  hash: h.hash.toHex(),
  parentHash: h.parentHash.toHex(),
});

async function heads() {
  const provider = new WsProvider(url, 1000);
  let disconnects = 0;
  provider.on("disconnected", () => { disconnects++; });
  const api = await ApiPromise.create({ provider, noInitWarn: true, throwOnConnect: true });
  emit({
    step: "ready",
    systemNumber: (await api.query.system.number()).toNumber(),
    specName: api.runtimeVersion.specName.toString(),
    specVersion: api.runtimeVersion.specVersion.toNumber(),
  });
  const unsubNew = await api.rpc.chain.subscribeNewHeads((h) => emit(header("new", h)));
  const unsubFinal = await api.rpc.chain.subscribeFinalizedHeads((h) => emit(header("finalized", h)));
  const lines = createInterface({ input: process.stdin });
  await new Promise((resolve) => lines.on("line", (l) => l.trim() === "stop" && resolve()));
  lines.close();
  unsubNew();
  unsubFinal();
  const lostBeforeDisconnect = { closed: wire.closed, disconnects };
  emit({ step: "summary", ...wire, ...lostBeforeDisconnect });
  await api.disconnect();
}

async function runtime() {
  const api = await ApiPromise.create({ provider: new WsProvider(url, 1000), noInitWarn: true });
  let unsub = () => {};
  const version = await new Promise((resolve) => {
    setTimeout(() => resolve(null), 10000);
    api.rpc.state
      .subscribeRuntimeVersion((v) => resolve(v))
      .then((u) => { unsub = u; });
  });
  unsub();
  emit({
    step: "runtime",
    received: version !== null,
    specName: version && version.specName.toString(),
    specVersion: version && version.specVersion.toNumber(),
    wire,
  });
  await api.disconnect();
}

try {
  await (scenario === "heads" ? heads() : runtime());
  emit({ step: "done" });
  process.exit(0);
} catch (e) {
  emit({ step: "error", message: String(e && e.message ? e.message : e) });
  process.exit(1);
}
