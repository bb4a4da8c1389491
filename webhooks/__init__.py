"""Webhooks: per-project HTTP callbacks on memory changes and erasures, from a durable outbox.

    models.py    Webhook (where to, which events, the signing secret, its state) and Delivery
                 (the outbox and the delivery log at once: ids only, never text or scope ids)
    outbox.py    what puts deliveries in the outbox: the trigger on memory history (migration
                 0001, in the change's own transaction) and erasure completion
    addresses.py the URL rules (memory.parts' syntax and allow-list) and the address check
    actions.py   the only writers of webhooks: create, update, delete, enable, rotate
    queries.py   the readers (the API, the dashboard)
    delivery.py  one attempt at one delivery: claim, render from history, sign, POST, record
    tasks.py     the Dramatiq actor; sweep.py, the sweeper for lost or stranded deliveries
    api.py       the Mem0 Platform's webhook endpoints

Imports memory.models, memory.parts and memory.jobs (below memory.actions), tenants, audit
and config; nothing in memory imports this package except memory.actions.erasure (the
erasure_complete event, through outbox.py) and the dashboard page memory.web.webhooks.
"""
