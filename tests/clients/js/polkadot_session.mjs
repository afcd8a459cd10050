// polkadot.js (@polkadot/api, HttpProvider) talking to chainproxy, as an app would.
//
//   node polkadot_session.mjs <scenario> <rpc-url> <source-ip>
//
// scenario: read | refusals | ratelimit | failover. Every connection leaves from
// <source-ip> (a 127.x.y.z address: the test's own rate-limit identity). Results
// are printed as lines "@@ {json}"; the last one is {"step": "done"}, or
// {"step": "error", "message": ...} with exit code 1. "failover" prints
// {"step": "ready"} and waits for a line on stdin before going on.
import { createInterface } from "node:readline";
import { Agent, setGlobalDispatcher } from "undici";
import { ApiPromise, HttpProvider, Keyring } from "@polkadot/api";

const [scenario, url, sourceIp] = process.argv.slice(2);
if (!scenario || !url || !sourceIp) {
  console.error("usage: node polkadot_session.mjs <scenario> <rpc-url> <source-ip>");
  process.exit(2);
}
// Node's fetch (which HttpProvider uses) goes through undici's global dispatcher.
setGlobalDispatcher(new Agent({ localAddress: sourceIp }));

const ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY";

const emit = (doc) => console.log("@@ " + JSON.stringify(doc));

async function rawPost(body) {
  // What the proxy really answered (HttpProvider only shows "[status]: text").
  const r = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const headers = {};
  for (const name of ["retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-policy"]) {
    headers[name] = r.headers.get(name);
  }
  return { status: r.status, headers, body: JSON.parse(await r.text()) };
}

async function session() {
  const provider = new HttpProvider(url);
  const api = await ApiPromise.create({ provider, noInitWarn: true, throwOnConnect: true });
  return { provider, api };
}

async function read() {
  const provider = new HttpProvider(url);
  const hash1 = await provider.send("chain_getBlockHash", [1]);
  emit({
    step: "raw",
    chain: await provider.send("system_chain", []),
    hash1,
    head: await provider.send("chain_getHeader", []),
  });
  const api = await ApiPromise.create({ provider, noInitWarn: true, throwOnConnect: true });
  const header = await api.rpc.chain.getHeader();
  const block1 = await api.rpc.chain.getBlock(hash1);
  const account = await api.query.system.account(ALICE);
  emit({
    step: "api",
    genesisHash: api.genesisHash.toHex(),
    specName: api.runtimeVersion.specName.toString(),
    specVersion: api.runtimeVersion.specVersion.toNumber(),
    pallets: api.runtimeMetadata.asLatest.pallets.map((p) => p.name.toString()),
    head: header.number.toNumber(),
    headHash: header.hash.toHex(),
    systemNumber: (await api.query.system.number()).toNumber(),
    ss58Prefix: api.consts.system.ss58Prefix.toNumber(),
    existentialDeposit: api.consts.balances.existentialDeposit.toString(),
    block1Number: block1.block.header.number.toNumber(),
    block1Hash: block1.block.header.hash.toHex(),
    aliceNonce: account.nonce.toNumber(),
    aliceFree: account.data.free.toString(),
  });
  await api.disconnect();
}

async function refusals() {
  const { provider, api } = await session();
  // ApiPromise.create has waited for the sr25519 WASM crypto.
  const keyring = new Keyring({ type: "sr25519", ss58Format: api.registry.chainSS58 });
  const [alice, bob] = [keyring.addFromUri("//Alice"), keyring.addFromUri("//Bob")];
  let submit = null;
  try {
    const hash = await api.tx.balances.transferKeepAlive(bob.address, 12345).signAndSend(alice);
    submit = { accepted: hash.toHex() };
  } catch (e) {
    submit = { error: e.message };
  }
  emit({ step: "signAndSend", ...submit });
  let raw = null;
  try {
    raw = { accepted: await provider.send("author_submitExtrinsic", ["0x00"]) };
  } catch (e) {
    raw = { error: e.message };
  }
  emit({ step: "send", ...raw });
  emit({
    step: "contract",
    ...(await rawPost({ jsonrpc: "2.0", id: 7, method: "author_submitExtrinsic", params: ["0x00"] })),
  });
  // the session still works after the refusals
  emit({ step: "after", head: (await api.rpc.chain.getHeader()).number.toNumber() });
  await api.disconnect();
}

async function ratelimit() {
  const { api } = await session();
  let ok = 0;
  let error = null;
  for (let i = 0; i < 500 && error === null; i++) {
    try {
      await api.rpc.system.health();
      ok++;
    } catch (e) {
      error = e.message;
    }
  }
  emit({ step: "limit", ok, error });
  emit({
    step: "contract",
    ...(await rawPost({ jsonrpc: "2.0", id: "x", method: "system_health", params: [] })),
  });
  await api.disconnect();
}

async function failover() {
  const { api } = await session();
  const head = (await api.rpc.chain.getHeader()).number.toNumber();
  emit({ step: "ready", head });
  const lines = createInterface({ input: process.stdin });
  await new Promise((resolve) => lines.once("line", resolve));
  lines.close();
  const seen = [];
  for (let i = 0; i < 8; i++) {
    const header = await api.rpc.chain.getHeader();
    const block = await api.rpc.chain.getBlock(header.hash);
    seen.push({
      head: header.number.toNumber(),
      systemNumber: (await api.query.system.number()).toNumber(),
      block: block.block.header.number.toNumber(),
    });
  }
  emit({ step: "after", seen });
  await api.disconnect();
}

const scenarios = { read, refusals, ratelimit, failover };
try {
  if (!(scenario in scenarios)) throw new Error(`unknown scenario ${scenario}`);
  await scenarios[scenario]();
  emit({ step: "done" });
  process.exit(0);
} catch (e) {
  emit({ step: "error", message: String(e && e.message ? e.message : e) });
  process.exit(1);
}
