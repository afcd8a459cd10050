"""``make soak``: hours of mixed traffic while everything fails at random.

* ``plan``: the chaos schedule (pure, seeded: a run can be replayed);
* ``stack``: the processes (simulated nodes, sidecar, Redis, two proxies behind
  HAProxy, as ``--workers 2`` runs them) and what chaos does to each;
* ``traffic``: the clients (HTTP calls and batches, WebSocket calls and
  subscriptions, refused and over-quota calls) and what each saw;
* ``tally``: what they saw, judged (errors, heads with a gap or a duplicate,
  p99 per minute; pure);
* ``report``: the figures, printed and written into docs/RELIABILITY.md.
"""
