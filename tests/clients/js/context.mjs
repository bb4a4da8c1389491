// The official JavaScript client, mem0ai, calling engram's POST /v1/context/ through its own
// HTTP session (`client.client`, the axios instance it authenticates), as docs/context.md shows.
//
//   ENGRAM_HOST=http://127.0.0.1:8000 ENGRAM_API_KEY=eng_... node context.mjs
//
// Prints one JSON document on stdout (harness.mjs); tests/memory/test_context.py asserts it.

import { runSteps } from "./harness.mjs";

const STEPS = [
  {
    name: "add",
    run: (client) =>
      client.add([{ role: "user", content: "I keep bees on my roof" }], {
        user_id: "maria",
        infer: false,
      }),
  },
  {
    name: "context",
    run: async (client) => {
      const { data } = await client.client.post("/v1/context/", {
        query: "What does she keep?",
        user_id: "maria",
        max_tokens: 300,
      });
      return data;
    },
  },
];

await runSteps(STEPS);
