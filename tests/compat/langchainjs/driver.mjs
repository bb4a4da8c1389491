// Drive LangChain JS's Mem0 memory (@langchain/community/memory/mem0: Mem0Memory) against a
// live engram.
//
// Run with Node 20+ in this folder (after `npm ci --ignore-scripts`), with ENGRAM_HOST,
// ENGRAM_API_KEY and ENGRAM_RUN set (see ../README.md). Prints one JSON document on stdout;
// anything else goes to stderr. ENGRAM_TRACE=1 logs every HTTP request and response to stderr.
//
// Mem0Memory builds its own client, `new MemoryClient({ ...mem0Options, apiKey })`, and mem0ai's
// MemoryClient defaults to https://api.mem0.ai. Its documented `mem0Options` (ClientOptions:
// apiKey, host, organization/project) takes a host, so no patch is needed:
//
//     new Mem0Memory({ apiKey, sessionId: userId, mem0Options: { apiKey, host: ENGRAM_HOST } })
//
// Everything else is LangChain's code, used as a chain uses its memory:
//   - saveContext({input}, {output}) sends one turn to Mem0:
//     client.add([{role: "user", content: input}, {role: "assistant", content: output}],
//                {user_id: sessionId, ...memoryOptions})  -> POST /v1/memories/
//   - loadMemoryVariables({input}) searches:
//     client.search(input, {user_id: sessionId, ...memoryOptions}) -> POST /v1/memories/search/
//   - loadMemoryVariables({}) (no input) lists:
//     client.getAll({user_id: sessionId, ...memoryOptions})      -> GET /v1/memories/?user_id=
// and renders the memories, joined by "\n", into its "history" string after a fixed preamble
// (condenseMem0MemoryIntoHumanMessage); the texts are read back from that string.
//
// Mem0Memory swallows client errors (console.error, then "" or a no-op), so the driver watches
// console.error during each step and turns those messages into the step's error.
//
// Mem0Memory cannot delete a Mem0 memory: clear() only clears the local chat history
// (BaseChatMemory), so delete_alice and list_alice_after_delete are reported under "skipped".
// No model is constructed or called; Mem0Memory is used on its own, not inside a chain.

process.env.MEM0_TELEMETRY = "false";
delete process.env.MEM0_API_KEY;

import { readFileSync } from "node:fs";

// Library chatter must not reach stdout: the JSON document is written with process.stdout.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

const HOST = (process.env.ENGRAM_HOST ?? "").replace(/\/+$/, "");
const API_KEY = process.env.ENGRAM_API_KEY;
const RUN = process.env.ENGRAM_RUN;
const TRACE = Boolean(process.env.ENGRAM_TRACE);
if (!HOST || !API_KEY || !RUN) {
  console.error("ENGRAM_HOST, ENGRAM_API_KEY and ENGRAM_RUN must be set");
  process.exit(2);
}

const USERS = { alice: `${RUN}-alice`, bob: `${RUN}-bob` };
const SEARCH_TIMEOUT_MS = 30_000;
const PACKAGE = "@langchain/community";
const PACKAGE_DIR = new URL("./node_modules/@langchain/community/", import.meta.url);

// mem0ai's MemoryClient talks through globalThis.fetch. Allow only engram and loopback (nothing
// may reach the cloud or telemetry), and trace when asked.
const ALLOWED = new Set([new URL(HOST).origin]);
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  const method = init.method ?? (input instanceof Request ? input.method : "GET");
  if (!ALLOWED.has(url.origin) && !LOOPBACK.has(url.hostname)) {
    console.error(`[driver] blocked request to ${method} ${url.href}`);
    throw new Error(`blocked non-local request to ${url.origin}`);
  }
  if (TRACE) console.error(`>> ${method} ${url.pathname}${url.search} ${init.body ?? ""}`);
  const response = await realFetch(input, init);
  if (TRACE) {
    const text = await response.clone().text();
    console.error(`<< ${response.status} ${text}`);
  }
  return response;
};

// Errors Mem0Memory logs instead of throwing, collected per step.
let swallowed = [];
const realError = console.error;
const WATCHED = /^(Error saving memory context|Error loading memories)/;
console.error = (...args) => {
  if (typeof args[0] === "string" && WATCHED.test(args[0])) {
    const err = args[1];
    const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    swallowed.push(`${args[0]} ${detail}`);
  }
  realError(...args);
};

const { Mem0Memory } = await import("@langchain/community/memory/mem0");

function version() {
  return JSON.parse(readFileSync(new URL("package.json", PACKAGE_DIR), "utf8")).version;
}

function newSession(user) {
  // A new conversation's memory for `user`, backed by Mem0 on engram.
  return new Mem0Memory({
    apiKey: API_KEY,
    sessionId: USERS[user],
    mem0Options: { apiKey: API_KEY, host: HOST },
  });
}

const PREAMBLE = "The MEMORIES of the USER are: \n\n\n";

function memoryTexts(variables) {
  // The memories loadMemoryVariables() rendered into its "history" string, one string each.
  const history = variables?.history;
  if (typeof history !== "string") {
    throw new Error(`loadMemoryVariables() returned no history string: ${JSON.stringify(variables)}`);
  }
  if (history === "") return []; // what it returns when the client call failed
  const at = history.indexOf(PREAMBLE);
  if (at < 0) throw new Error(`history has no memories section: ${JSON.stringify(history)}`);
  return history
    .slice(at + PREAMBLE.length)
    .split("\n")
    .map((t) => t.trim())
    .filter(Boolean);
}

function raiseSwallowed() {
  if (swallowed.length) throw new Error(swallowed.join("; "));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function add(user, text) {
  const memory = newSession(user);
  // A conversation turn: the user's message and the reply a chain would save with it.
  await memory.saveContext({ input: text }, { output: "Noted." }); // resolves to undefined
  raiseSwallowed();
  const messages = await memory.chatHistory.getMessages();
  return { chat_history: messages.map((m) => `${m.getType()}: ${m.content}`) };
}

async function search(user, query) {
  const memory = newSession(user); // a later conversation
  const deadline = Date.now() + SEARCH_TIMEOUT_MS;
  for (;;) {
    swallowed = [];
    const texts = memoryTexts(await memory.loadMemoryVariables({ input: query }));
    if (texts.length) return texts;
    if (Date.now() >= deadline) {
      raiseSwallowed();
      return texts;
    }
    await sleep(1000);
  }
}

async function list(user) {
  const memory = newSession(user);
  const texts = memoryTexts(await memory.loadMemoryVariables({}));
  raiseSwallowed();
  return texts;
}

const doc = { framework: "langchainjs", version: null, users: { ...USERS }, steps: {} };
try {
  doc.version = version();
} catch (e) {
  console.error(`[driver] cannot read ${PACKAGE}'s version: ${e}`);
}

async function step(name, fn) {
  swallowed = [];
  try {
    doc.steps[name] = { ok: true, result: await fn(), error: null };
  } catch (e) {
    const error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    doc.steps[name] = { ok: false, result: null, error };
  }
}

await step("add_alice", () => add("alice", "I am allergic to peanuts."));
await step("add_bob", () => add("bob", "I live in Lisbon and I play the cello."));
await step("search_alice", () => search("alice", "What food should I avoid?"));
await step("search_bob", () => search("bob", "Where do I live?"));
await step("list_alice", () => list("alice"));

const ver = `${PACKAGE} ${doc.version}`;
doc.skipped = {
  delete_alice:
    `${ver}: Mem0Memory has no delete; clear() only clears the local chat history ` +
    "(BaseChatMemory.clear), it never calls Mem0",
  list_alice_after_delete: `${ver}: no delete (see delete_alice)`,
};

process.stdout.write(JSON.stringify(doc) + "\n");
