"""Calls out to agents: answers, messages and cancels (answers), the A2A client and its HTTP
(a2a_client, agent_http), and registering, refreshing and following agents (agents, sync,
following).
"""
