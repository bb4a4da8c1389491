"""The language-model layer of extraction: Claude through the official SDK, or an offline stand-in.

Two calls, each a forced tool use with a JSON schema (no free-form JSON parsing):
- extract: candidate facts from a conversation (text, category, confidence, supporting message
  positions), resolving relative dates against the observation date;
- decide: for each candidate, ADD / UPDATE / DELETE / NONE against the most similar existing
  memories, shown to the model under small integer ids (models invent UUIDs; an id that was not
  shown is rejected, never guessed).

Then the graph, over the facts that become new memories, three more forced calls:
- entities: the people, places, things the facts are about, typed; self-references ("User",
  "I", "me") name the scope's own entity (its user_id, or agent_id for an agent's scope);
- relations: (source, relationship, destination) triples among those entities only, each naming
  the fact it comes from (so the edge can cite the memory); a triple naming anything else is
  dropped;
- contradictions: the existing valid edges touching those entities, shown under small ids, and
  which of them the new triples make false (not merely add to); an id not shown is rejected.

The pipeline (retrieval, applying decisions, events) uses these through `Extractor`.

Modules, each imported from where it is defined (this package exports nothing):
- types: the result types, ModelOutputError and the Extractor interface (at the bottom);
- schemas: the tools and their input schemas, reading a reply, each call's token budget;
- prompts: every prompt text and how a conversation is written into one (for every provider);
- clean: the entity and relation clean-up both extractors share;
- claude: ClaudeExtractor (the anthropic SDK: forced tool calls, retries, usage);
- offline: OfflineExtractor, the rule-based stand-in;
- provider: get_extractor, which of the two this process uses.

May import memory.parts, Django's settings, pydantic and the anthropic SDK; nothing else of
engram (not the pipeline, models or actions).
"""
