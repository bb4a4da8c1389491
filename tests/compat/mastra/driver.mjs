// Mastra's Mem0 integration (@mastra/mem0, Mem0Integration) against a live engram.
//
// Run with `node driver.mjs` in this folder (after `npm ci --ignore-scripts`), with ENGRAM_HOST,
// ENGRAM_API_KEY and ENGRAM_RUN set; prints one JSON document on stdout (see ../README.md).
// Everything else goes to stderr (ENGRAM_TRACE=1 also logs every HTTP exchange there).
//
// How it is pointed at engram: no workaround is needed beyond the integration's own `host`
// option. Mem0Integration({ config }) builds `new MemoryClient(config)` (mem0ai) itself, and its
// config type (Mem0ClientConfig) takes `host`, which MemoryClient uses instead of
// https://api.mem0.ai:
//
//     const mem0 = new Mem0Integration({ config: { apiKey, host, user_id: "alice" } });
//     await mem0.createMemory("I am allergic to peanuts.");
//     await mem0.searchMemory("What food should I avoid?");
//
// One integration per user, as Mastra's and Mem0's docs show (config.user_id). What it sends:
// Mem0AIClient spreads the whole config into every add and search body (after mem0ai's own
// fields), so each POST also carries `apiKey` (the key itself) and `host`, next to `user_id`,
// and the org_id/project_id mem0ai learnt from GET /v1/ping/.
//
// What it cannot do: Mem0Integration 0.1.4 has createMemory and searchMemory only (no list, no
// delete), so list_alice, delete_alice and list_alice_after_delete are skipped. No model is
// involved: both calls go straight to mem0ai's MemoryClient (POST /v1/memories/ and
// POST /v1/memories/search/).

import { readFileSync } from "node:fs";

// The real stdout is kept for the one JSON document; library chatter goes to stderr.
const writeStdout = process.stdout.write.bind(process.stdout);
console.log = console.error;
console.info = console.error;
console.debug = console.error;
process.env.MEM0_TELEMETRY = "false";

const HOST = process.env.ENGRAM_HOST.replace(/\/+$/, "");
const API_KEY = process.env.ENGRAM_API_KEY;
const RUN = process.env.ENGRAM_RUN;
const USERS = { alice: `${RUN}-alice`, bob: `${RUN}-bob` };
const SEARCH_WAIT_MS = 30_000;
const TRACE_TO_STDERR = process.env.ENGRAM_TRACE === "1";

function installedVersion(name) {
  const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")).version;
}

// --- HTTP trace, and no network but engram's host -----------------------------------------------

const TRACE = [];
const realFetch = globalThis.fetch;
const allowed = new URL(HOST).host;

globalThis.fetch = async (input, init = {}) => {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  const method = (init.method || (input instanceof Request ? input.method : "GET")).toUpperCase();
  if (new URL(url).host !== allowed) {
    const entry = { method, url, refused: "not engram's host" };
    TRACE.push(entry);
    console.error("HTTP " + JSON.stringify(entry));
    throw new Error(`driver refused a request to ${url} (only ${allowed} is allowed)`);
  }
  let request = init.body;
  try {
    request = request ? JSON.parse(request) : null;
  } catch {
    /* not JSON: keep the text */
  }
  const response = await realFetch(input, init);
  const text = await response.clone().text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON: keep the text */
  }
  const entry = { method, url, request, status: response.status, response: body };
  TRACE.push(entry);
  if (TRACE_TO_STDERR) console.error("HTTP " + JSON.stringify({ ...entry, request: redact(request) }));
  return response;
};

function last(method, pathPart) {
  for (let i = TRACE.length - 1; i >= 0; i--) {
    const e = TRACE[i];
    if (e.method === method && new URL(e.url).pathname === pathPart) {
      return { status: e.status, request: redact(e.request), response: e.response };
    }
  }
  return null;
}

// The integration puts the API key into each body; the document shows that it did, not the key.
function redact(body) {
  if (!body || typeof body !== "object" || Array.isArray(body)) return body;
  return Object.fromEntries(
    Object.entries(body).map(([k, v]) => [k, k === "apiKey" && v === API_KEY ? "<the API key>" : v]),
  );
}

const { Mem0Integration } = await import("@mastra/mem0");

// searchMemory/createMemory answer one string: a fixed prefix, then one memory per line.
const MEMORY_STRING_PREFIX = "The MEMORIES of the USER are: \n\n";

function texts(memoryString) {
  if (!memoryString) return [];
  const at = memoryString.indexOf(MEMORY_STRING_PREFIX);
  const rest = at >= 0 ? memoryString.slice(at + MEMORY_STRING_PREFIX.length) : memoryString;
  return rest.split("\n").filter((line) => line.length > 0);
}

// --- steps ------------------------------------------------------------------------------------------

const steps = {};
const skipped = {
  list_alice:
    "Mem0Integration (@mastra/mem0 0.1.4) has no list call: its public API is createMemory and " +
    "searchMemory only (its Mem0AIClient wrapper too)",
  delete_alice: "Mem0Integration (@mastra/mem0 0.1.4) has no delete call (createMemory and searchMemory only)",
  list_alice_after_delete: "Mem0Integration has neither a list nor a delete call (see list_alice)",
};

async function step(name, fn) {
  try {
    const result = await fn();
    steps[name] = { ok: true, result, error: null };
  } catch (e) {
    steps[name] = { ok: false, result: null, error: `${e?.name ?? typeof e}: ${e?.message ?? e}` };
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const mem0 = {};

function integrationFor(who) {
  mem0[who] = new Mem0Integration({ config: { apiKey: API_KEY, host: HOST, user_id: USERS[who] } });
  return mem0[who];
}

async function add(who, statement) {
  const returned = await integrationFor(who).createMemory(statement);
  return { returned, engram: last("POST", "/v1/memories/") };
}

async function search(who, query) {
  if (!mem0[who]) throw new Error(`no Mem0Integration for ${who} (add_${who} failed)`);
  const deadline = Date.now() + SEARCH_WAIT_MS;
  for (;;) {
    const found = texts(await mem0[who].searchMemory(query));
    if (found.length > 0 || Date.now() >= deadline) return found;
    await sleep(1000);
  }
}

await step("add_alice", () => add("alice", "I am allergic to peanuts."));
await step("add_bob", () => add("bob", "I live in Lisbon and I play the cello."));
await step("search_alice", () => search("alice", "What food should I avoid?"));
await step("search_bob", () => search("bob", "Where do I live?"));

const searchRequest = last("POST", "/v1/memories/search/");

const document = {
  framework: "mastra",
  version: installedVersion("@mastra/mem0"),
  mem0ai: installedVersion("mem0ai"),
  users: USERS,
  steps,
  skipped,
  sent: {
    add: steps.add_alice?.result?.engram?.request ?? null,
    search: searchRequest?.request ?? null,
  },
  refused: TRACE.filter((e) => e.refused).map((e) => e.url),
};
writeStdout(JSON.stringify(document, null, 2) + "\n");
