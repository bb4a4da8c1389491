// The official JavaScript client, mem0ai (pinned by package-lock.json beside this file), against
// an engram server: every memory method of `MemoryClient`, called in turn.
//
//   ENGRAM_HOST=http://127.0.0.1:8000 ENGRAM_API_KEY=eng_... node client.mjs
//
// Prints one JSON document on stdout, what each step returned or raised (harness.mjs, shared
// with platform.mjs, which calls the project, webhook and profile methods).
//
// STEPS is the table: one entry per call, run in order. A step receives the client and `ctx`
// (ctx.results: what earlier steps returned, by name; ctx.host, ctx.apiKey) and returns what the
// method returned. Adding a method is one entry. tests/memory/test_mem0_js_client.py asserts them.
//
// The memories it writes (user_id, all added with infer false unless said otherwise):
//   alice  three facts (add_raw): searched, listed in pages, read, updated, given feedback,
//          exported, batch-updated, batch-deleted, deleted
//   dave   one conversation added with inference (add_inferred): a worker extracts it later
//   erin   a superseded chain the caller may seed: deleted with its versions (delete_linked)
//   bob, carol, frank  one fact each: delete_all, deleteUser, deleteUsers

import { randomUUID } from "node:crypto";

import { MemoryClient, runSteps } from "./harness.mjs";

const raw = (text) => ({ role: "user", content: text });
// The id of a memory an add step returned, by its text.
const idOf = (ctx, step, text) => {
  const found = ctx.results[step].results.find((r) => r.memory === text);
  if (!found) throw new Error(`${step} returned no memory "${text}"`);
  return found.id;
};
const COFFEE = "I love dark roast coffee";
const SISTER = "My sister lives in Lisbon";
const PEANUTS = "I am allergic to peanuts";
const alice = { user_id: "alice" };

const STEPS = [
  {
    name: "ping",
    run: async (client) => {
      await client.ping();
      return { organizationId: client.organizationId, projectId: client.projectId };
    },
  },
  {
    name: "add_raw",
    run: (client) =>
      client.add([raw(COFFEE), raw(SISTER), raw(PEANUTS)], {
        userId: "alice",
        infer: false,
        metadata: { source: "js-client", Mixed_Case: 1 },
      }),
  },
  { name: "add_raw_bob", run: (c) => c.add("Bob keeps bees", { userId: "bob", infer: false }) },
  { name: "add_raw_carol", run: (c) => c.add("Carol sails", { userId: "carol", infer: false }) },
  {
    name: "add_raw_frank",
    run: (c) => c.add([raw("Frank bakes bread")], { filters: { user_id: "frank" }, infer: false }),
  },
  {
    name: "add_inferred",
    run: (c) => c.add("Hi! I love hiking in the Alps. What's new?", { userId: "dave" }),
  },
  {
    name: "search",
    run: (c) =>
      c.search("what does the user drink?", {
        filters: alice,
        topK: 2,
        threshold: 0,
        rerank: false,
        keywordSearch: true,
        latestOnly: true,
        showExpired: false,
      }),
  },
  {
    name: "search_logical_filters",
    run: (c) =>
      c.search("where does my family live?", {
        filters: {
          AND: [alice, { created_at: { gte: "2000-01-01" } }],
          NOT: { metadata: { source: "elsewhere" } },
        },
        topK: 5,
      }),
  },
  { name: "get_all_page_1", run: (c) => c.getAll({ filters: alice, page: 1, pageSize: 2 }) },
  { name: "get_all_page_2", run: (c) => c.getAll({ filters: alice, page: 2, pageSize: 2 }) },
  { name: "get", run: (c, ctx) => c.get(idOf(ctx, "add_raw", COFFEE)) },
  {
    name: "update",
    run: (c, ctx) =>
      c.update(idOf(ctx, "add_raw", COFFEE), {
        text: "I love light roast coffee",
        metadata: { v: 2 },
      }),
  },
  { name: "get_after_update", run: (c, ctx) => c.get(idOf(ctx, "add_raw", COFFEE)) },
  { name: "history", run: (c, ctx) => c.history(idOf(ctx, "add_raw", COFFEE)) },
  {
    name: "feedback",
    run: (c, ctx) =>
      c.feedback({
        memoryId: idOf(ctx, "add_raw", COFFEE),
        feedback: "POSITIVE",
        feedbackReason: "accurate",
      }),
  },
  {
    name: "create_memory_export",
    run: (c) =>
      c.createMemoryExport({
        schema: { type: "object", properties: { memory: { type: "string" } } },
        filters: alice,
      }),
  },
  {
    name: "get_memory_export",
    run: (c, ctx) => c.getMemoryExport({ memoryExportId: ctx.results.create_memory_export.id }),
  },
  {
    name: "get_memory_export_by_filters",
    run: (c) => c.getMemoryExport({ filters: alice }),
  },
  {
    name: "batch_update",
    run: (c, ctx) =>
      c.batchUpdate([{ memoryId: idOf(ctx, "add_raw", SISTER), text: "My sister lives in Porto" }]),
  },
  { name: "batch_delete", run: (c, ctx) => c.batchDelete([idOf(ctx, "add_raw", PEANUTS)]) },
  { name: "delete", run: (c, ctx) => c.delete(idOf(ctx, "add_raw", COFFEE)) },
  { name: "get_all_alice", run: (c) => c.getAll({ filters: alice }) },
  {
    // The newest of erin's memories, with every version it superseded (the caller seeds a chain;
    // without one, a single fresh memory is deleted).
    name: "delete_linked",
    run: async (c) => {
      let [latest] = (await c.getAll({ filters: { user_id: "erin" } })).results;
      if (!latest) {
        [latest] = (await c.add("Erin lives in Paris", { userId: "erin", infer: false })).results;
      }
      return c.delete(latest.id, { deleteLinked: true });
    },
  },
  {
    name: "get_all_erin_every_version",
    run: (c) => c.getAll({ filters: { user_id: "erin" }, latestOnly: false }),
  },
  { name: "users", run: (c) => c.users() },
  { name: "delete_all", run: (c) => c.deleteAll({ userId: "bob" }) },
  { name: "delete_user", run: (c) => c.deleteUser({ entity_type: "user", entity_id: "carol" }) },
  { name: "delete_users", run: (c) => c.deleteUsers({ userId: "frank" }) },
  { name: "users_after_deletes", run: (c) => c.users() },
  { name: "get_missing", run: (c) => c.get(randomUUID()) },
  // Bad input: the server's 400 (a JSON `detail`) as the client raises it.
  { name: "search_invalid", run: (c) => c.search("tea", { filters: alice, topK: 0 }) },
  {
    name: "wrong_key",
    run: (_, ctx) => new MemoryClient({ apiKey: "eng_not_a_real_key", host: ctx.host }).users(),
  },
];

await runSteps(STEPS);
