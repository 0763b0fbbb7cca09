"""The example agent: a real A2A 1.0 JSON-RPC agent (a2a-sdk) speaking the Nylorun profile v2.

It is Onlooker's demo peer and the peer of the end-to-end tests; run it with
`python -m demo.agent --port 9999 --signing-secret whsec_...`. Onlooker itself (`tasks/`) never
imports it: the agent only talks to Onlooker over HTTP, like any agent would.

- `demo.agent`: the server, its card and the command line (`serve()` runs it in a thread);
- `demo.executor`: turns messages into scenario runs, answers and cancellations;
- `demo.scenarios`: what the agent does (release, research, connect);
- `demo.run`: what a scenario can say about its task, as A2A events with profile metadata;
- `demo.pushes`: push notifications, signed (Standard Webhooks) and retried with backoff.
"""
