// What client.mjs and platform.mjs share: the official client, loaded with telemetry off, and the
// runner of a STEPS table.
//
// runSteps(STEPS) calls each step in order with the client and `ctx` (ctx.results: what earlier
// steps returned, by name; ctx.host, ctx.apiKey) and prints one JSON document on stdout:
//   {"client": "mem0ai", "version": "3.3.1",
//    "steps": {"<name>": {"ok": true, "result": <what the method returned>}
//                      | {"ok": false, "error": {"class", "message", "code"}}, ...}}
// It exits 0 even when a step raised (the caller judges every step); only a failure of the
// script itself (no host or key, the package missing) exits non-zero.

import { readFileSync } from "node:fs";

// Set before the package loads (it reads the variable once): the client never phones home.
process.env.MEM0_TELEMETRY = "false";
export const { MemoryClient } = await import("mem0ai");

function described(error) {
  return {
    class: error?.name ?? error?.constructor?.name ?? typeof error,
    message: String(error?.message ?? error),
    code: error?.errorCode ?? null,
  };
}

export async function runSteps(STEPS) {
  const host = process.env.ENGRAM_HOST;
  const apiKey = process.env.ENGRAM_API_KEY;
  if (!host || !apiKey) {
    console.error("set ENGRAM_HOST and ENGRAM_API_KEY");
    process.exit(2);
  }
  const client = new MemoryClient({ apiKey, host });
  const { version } = JSON.parse(
    readFileSync(new URL("./node_modules/mem0ai/package.json", import.meta.url), "utf8"),
  );
  const ctx = { host, apiKey, results: {} };
  const steps = {};
  for (const step of STEPS) {
    try {
      const result = await step.run(client, ctx);
      ctx.results[step.name] = result;
      steps[step.name] = { ok: true, result: result ?? null };
    } catch (error) {
      steps[step.name] = { ok: false, error: described(error) };
    }
  }
  process.stdout.write(JSON.stringify({ client: "mem0ai", version, steps }) + "\n");
}
