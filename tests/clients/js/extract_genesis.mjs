// Writes the raw genesis (chain spec with the runtime) of Rococo Asset Hub, an
// Aura parachain that chopsticks can run offline, to the path given as argv[2].
// The spec ships inside @substrate/connect-known-chains; it is never committed.
import { writeFileSync } from "node:fs";
import { chainSpec } from "@substrate/connect-known-chains/rococo_v2_2_asset_hub";

const out = process.argv[2];
if (!out) {
  console.error("usage: node extract_genesis.mjs OUT.json");
  process.exit(2);
}
JSON.parse(chainSpec); // fail here, not inside chopsticks, if the package changed
writeFileSync(out, chainSpec);
console.log(out);
