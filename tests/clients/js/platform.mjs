// The official JavaScript client, mem0ai, against an engram server: every project, webhook and
// profile method of `MemoryClient`, called in turn (client.mjs calls the memory methods).
//
//   ENGRAM_HOST=http://127.0.0.1:8000 ENGRAM_API_KEY=eng_... \
//   ENGRAM_READER_API_KEY=eng_... ENGRAM_WEBHOOK_URL=http://127.0.0.1:8765/hook node platform.mjs
//
// Prints one JSON document on stdout, what each step returned or raised (harness.mjs); the STEPS
// table works as client.mjs's. tests/memory/test_mem0_js_client_platform.py asserts them.
//
// What the caller provides: ENGRAM_API_KEY acting as an admin of its organization, with user
// alice holding a few memories (profiles are generated from them, by a worker that runs while
// the script does); ENGRAM_READER_API_KEY, a key of the same project made by a reader; and
// ENGRAM_WEBHOOK_URL, a URL the operator allows (ENGRAM_FETCH_ALLOWED_HOSTS). Nothing is
// delivered to it.

import { randomUUID } from "node:crypto";

import { MemoryClient, runSteps } from "./harness.mjs";

const webhookUrl = process.env.ENGRAM_WEBHOOK_URL;
const readerKey = process.env.ENGRAM_READER_API_KEY;
if (!webhookUrl || !readerKey) {
  console.error("platform.mjs: set ENGRAM_WEBHOOK_URL and ENGRAM_READER_API_KEY");
  process.exit(2);
}

// The Python client's test schema (tests/memory/test_profiles.py): snake_case property names,
// which the client must keep as they are.
const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", description: "The user's name" },
    home_city: { type: "string", description: "Where the user lives" },
    work: { type: "string", description: "The user's job or employer" },
    family: { type: "array", items: { type: "string" }, description: "Family" },
    likes: { type: "array", items: { type: "string" }, description: "Hobbies" },
    shoe_size: { type: "integer", description: "Shoe size (EU)" },
  },
};
const PROFILE_KEY = "js-profile-key-1";
const POLL_SECONDS = 60;

// A job polled through getProfileJob until the worker has finished it (or the time is up: the
// step then returns the job as it last was, and the test fails on its status).
async function finished(client, statusUrl) {
  const deadline = Date.now() + POLL_SECONDS * 1000;
  for (;;) {
    const answer = await client.getProfileJob(statusUrl);
    if (["SUCCEEDED", "FAILED"].includes(answer.job.status) || Date.now() > deadline) {
      return answer;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const STEPS = [
  // Projects.
  {
    name: "get_project_fields",
    run: (c) => c.getProject({ fields: ["name", "customInstructions", "userRole", "decay"] }),
  },
  {
    name: "update_project",
    run: (c) =>
      c.updateProject({
        customInstructions: "Only remember food.",
        customCategories: [{ travel_plans: "Trips" }, "food"],
        decay: false,
      }),
  },
  { name: "get_project", run: (c) => c.getProject({}) },
  { name: "update_project_refused", run: (c) => c.updateProject({ memoryDepth: "deep" }) },
  { name: "update_project_decay", run: (c) => c.updateProject({ decay: true }) },
  {
    name: "get_project_as_reader",
    run: (_, ctx) =>
      new MemoryClient({ apiKey: readerKey, host: ctx.host }).getProject({ fields: ["userRole"] }),
  },
  {
    name: "update_project_as_reader",
    run: (_, ctx) =>
      new MemoryClient({ apiKey: readerKey, host: ctx.host }).updateProject({
        customInstructions: "Remember everything.",
      }),
  },

  // Webhooks: "kept" is created and changed, "dropped" created and deleted.
  { name: "get_webhooks_none", run: (c) => c.getWebhooks() },
  {
    name: "create_webhook",
    run: (c) => c.createWebhook({ name: "kept", url: webhookUrl, eventTypes: ["memory_add"] }),
  },
  {
    name: "create_webhook_dropped",
    run: (c) =>
      c.createWebhook({
        name: "dropped",
        url: webhookUrl,
        eventTypes: ["memory_update", "memory_delete"],
      }),
  },
  {
    name: "create_webhook_private_address",
    run: (c) =>
      c.createWebhook({ name: "x", url: "http://10.1.2.3/hook", eventTypes: ["memory_add"] }),
  },
  {
    name: "create_webhook_unknown_event",
    run: (c) => c.createWebhook({ name: "x", url: webhookUrl, eventTypes: ["memory_explode"] }),
  },
  { name: "get_webhooks", run: (c) => c.getWebhooks() },
  {
    name: "update_webhook",
    run: (c, ctx) =>
      c.updateWebhook({
        webhookId: ctx.results.create_webhook.webhookId,
        name: "renamed",
        eventTypes: ["memory_add", "memory_categorize"],
      }),
  },
  {
    name: "delete_webhook",
    run: (c, ctx) => c.deleteWebhook({ webhookId: ctx.results.create_webhook_dropped.webhookId }),
  },
  {
    name: "delete_webhook_again",
    run: (c, ctx) => c.deleteWebhook({ webhookId: ctx.results.create_webhook_dropped.webhookId }),
  },
  {
    name: "get_webhooks_by_project_id",
    run: (c) => c.getWebhooks({ projectId: c.projectId }),
  },
  { name: "get_webhooks_other_project", run: (c) => c.getWebhooks({ projectId: randomUUID() }) },

  // Profiles: nothing until the settings enable them, then one trigger and one sample.
  { name: "get_profile_not_enabled", run: (c) => c.getProfile({ entityId: "alice" }) },
  { name: "get_profile_settings_default", run: (c) => c.getProfileSettings() },
  {
    name: "generate_profile_not_enabled",
    run: (c) => c.generateProfile({ entityId: "alice", idempotencyKey: "js-too-early-1" }),
  },
  {
    name: "update_profile_settings",
    run: (c) =>
      c.updateProfileSettings({
        enabled: true,
        schema: SCHEMA,
        customInstructions: "Short values",
      }),
  },
  { name: "get_profile_settings", run: (c) => c.getProfileSettings() },
  {
    name: "update_profile_settings_invalid",
    run: (c) => c.updateProfileSettings({ schema: { properties: { age: { type: "integer" } } } }),
  },
  {
    name: "generate_profile",
    run: (c) => c.generateProfile({ entityId: "alice", idempotencyKey: PROFILE_KEY }),
  },
  {
    name: "generate_profile_replayed",
    run: (c) => c.generateProfile({ entityId: "alice", idempotencyKey: PROFILE_KEY }),
  },
  {
    name: "profile_job_finished",
    run: (c, ctx) => finished(c, ctx.results.generate_profile.statusUrl),
  },
  { name: "get_profile_job", run: (c, ctx) => c.getProfileJob(ctx.results.generate_profile.jobId) },
  { name: "get_profile", run: (c) => c.getProfile({ entityId: "alice" }) },
  { name: "sample_profiles", run: (c) => c.sampleProfiles({ limit: 2 }) },
  // Within a minute of the last sample: refused, whatever the worker is doing.
  { name: "sample_profiles_too_soon", run: (c) => c.sampleProfiles() },
  {
    name: "sample_job_finished",
    run: (c, ctx) => finished(c, ctx.results.sample_profiles.statusUrl),
  },
  { name: "get_profile_after_sample", run: (c) => c.getProfile({ entityId: "alice" }) },
  { name: "get_profile_missing", run: (c) => c.getProfile({ entityId: "nobody" }) },
  { name: "generate_profile_missing", run: (c) => c.generateProfile({ entityId: "nobody" }) },
  { name: "get_profile_job_missing", run: (c) => c.getProfileJob(randomUUID()) },
];

await runSteps(STEPS);
