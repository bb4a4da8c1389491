// The Vercel AI SDK's Mem0 provider (@mem0/vercel-ai-provider 3.0.2) against a live engram.
//
// Run with Node >= 18 in this folder (after `npm ci --ignore-scripts`), with ENGRAM_HOST,
// ENGRAM_API_KEY and ENGRAM_RUN set. Prints one JSON document on stdout (see ../README.md);
// everything else goes to stderr. ENGRAM_TRACE=1 logs every HTTP exchange to stderr.
//
// The provider does not use mem0ai: its memory helpers (addMemories, getMemories,
// retrieveMemories, searchMemories, and createMem0's language model, which calls the same
// addMemories + getMemories before asking the wrapped LLM) call fetch() themselves, on
// `${config.host || "https://api.mem0.ai"}/v3/memories/add/` and `/v3/memories/search/`, with
// `Authorization: Token ${config.mem0ApiKey || $MEM0_API_KEY}`. The workaround is only its own
// documented `host` option, in the config every helper takes (createMem0's `mem0Config` too):
//
//     const config = { host: ENGRAM_HOST, mem0ApiKey: ENGRAM_API_KEY, user_id: "alice" };
//     await addMemories([{ role: "user", content: [{ type: "text", text: "..." }] }], config);
//     const memories = await getMemories("What food should I avoid?", config);
//
// What is driven: the exported helpers directly. createMem0()'s model always ends by asking the
// wrapped LLM (OpenAI, Anthropic, ...), so it is not driven here: no model call is ever made.

// Library chatter (the helpers console.error their failures; nothing may reach stdout but the
// JSON document) goes to stderr.
const jsonOut = console.log.bind(console);
console.log = console.error;
console.info = console.error;
console.debug = console.error;

process.env.MEM0_TELEMETRY = "false";
delete process.env.MEM0_API_KEY; // the key is passed explicitly, never picked up from the env

const HOST = process.env.ENGRAM_HOST.replace(/\/+$/, "");
const API_KEY = process.env.ENGRAM_API_KEY;
const RUN = process.env.ENGRAM_RUN;
const TRACE = process.env.ENGRAM_TRACE === "1";
const USERS = { alice: `${RUN}-alice`, bob: `${RUN}-bob` };
const SEARCH_TIMEOUT_MS = 30_000;

const doc = {
  framework: "vercelai",
  version: null,
  users: USERS,
  steps: {},
  skipped: {},
};

// Every HTTP exchange the helpers make (they use the global fetch), for stderr and for the add
// steps' results. Anything but the loopback is refused, so no request can leave the machine.
const httpLog = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const url = typeof input === "string" ? input : input.url ?? String(input);
  const { hostname } = new URL(url);
  if (!["127.0.0.1", "localhost", "[::1]", "::1"].includes(hostname)) {
    throw new Error(`refused: a request to ${url} (only the loopback is allowed)`);
  }
  let json = init.body ?? null;
  try {
    json = json == null ? null : JSON.parse(json);
  } catch {
    // not JSON: keep the text
  }
  const entry = { method: init.method ?? "GET", url, json };
  httpLog.push(entry);
  const response = await realFetch(input, init);
  const text = await response.clone().text();
  entry.status = response.status;
  try {
    entry.body = JSON.parse(text);
  } catch {
    entry.body = text;
  }
  if (TRACE) console.error("HTTP", JSON.stringify(entry));
  return response;
};

async function step(name, fn) {
  try {
    doc.steps[name] = { ok: true, result: await fn(), error: null };
  } catch (err) {
    console.error(`step ${name} failed:`, err);
    const type = err?.constructor?.name ?? typeof err;
    doc.steps[name] = { ok: false, result: null, error: `${type}: ${err?.message ?? err}` };
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const { readFile } = await import("node:fs/promises");
  const pkg = new URL("./node_modules/@mem0/vercel-ai-provider/package.json", import.meta.url);
  doc.version = JSON.parse(await readFile(pkg, "utf8")).version;

  const { addMemories, getMemories, retrieveMemories, searchMemories } = await import(
    "@mem0/vercel-ai-provider"
  );

  // The config each helper takes (Mem0ConfigSettings): engram's host is the whole workaround.
  const configFor = (who) => ({ host: HOST, mem0ApiKey: API_KEY, user_id: USERS[who] });

  const add = (who, text) => async () => {
    const before = httpLog.length;
    // As createMem0's model stores a conversation: the AI SDK prompt (LanguageModelV3Prompt)
    // goes to addMemories, which sends it as Mem0 messages.
    const prompt = [{ role: "user", content: [{ type: "text", text }] }];
    const returned = await addMemories(prompt, configFor(who));
    const adds = httpLog.slice(before).filter((e) => e.url.endsWith("/v3/memories/add/"));
    const last = adds.at(-1);
    return {
      returned,
      sent: last?.json ?? null,
      status: last?.status ?? null,
      answer: last?.body ?? null,
    };
  };

  // getMemories: the helper that returns the search's memories as a list (it throws on an HTTP
  // error, where searchMemories would answer [] and hide it).
  const search = (who, query) => async () => {
    const deadline = Date.now() + SEARCH_TIMEOUT_MS;
    for (;;) {
      const memories = await getMemories(query, configFor(who));
      const texts = memories.map((m) => m?.memory);
      if (texts.length || Date.now() >= deadline) return texts;
      await sleep(1000);
    }
  };

  await step("add_alice", add("alice", "I am allergic to peanuts."));
  await step("add_bob", add("bob", "I live in Lisbon and I play the cello."));
  await step("search_alice", search("alice", "What food should I avoid?"));
  await step("search_bob", search("bob", "Where do I live?"));

  // The other two search helpers, on the same query, outside the contract's steps: what
  // retrieveMemories builds for a system prompt, and searchMemories' raw answer.
  doc.other_helpers = {};
  try {
    doc.other_helpers.retrieveMemories_alice = await retrieveMemories(
      "What food should I avoid?",
      configFor("alice"),
    );
    doc.other_helpers.searchMemories_bob = await searchMemories(
      "Where do I live?",
      configFor("bob"),
    );
  } catch (err) {
    doc.other_helpers.error = `${err?.constructor?.name}: ${err?.message ?? err}`;
  }

  const noListOrDelete =
    "@mem0/vercel-ai-provider 3.0.2 exports only addMemories (POST /v3/memories/add/), " +
    "getMemories / retrieveMemories / searchMemories (all POST /v3/memories/search/) and the " +
    "createMem0 language-model provider; it does not wrap mem0ai's MemoryClient";
  doc.skipped = {
    list_alice: `${noListOrDelete}, and has no list (get-all) of a user's memories`,
    delete_alice: `${noListOrDelete}, and has no delete of a memory or a user`,
    list_alice_after_delete: "no list and no delete in the integration (see above)",
  };
}

try {
  await main();
} catch (err) {
  // import or setup failure: still one JSON document
  console.error(err);
  doc.error = `${err?.constructor?.name}: ${err?.message ?? err}`;
}
jsonOut(JSON.stringify(doc, null, 2));
