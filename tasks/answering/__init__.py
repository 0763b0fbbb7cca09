"""Calls out to agents: answers to what they ask (answers), dismissing what they forgot
(dismissals), messages, new sessions and cancels (talking), and the rules these share (who
may act, and why an action is refused: rules); reading agent cards and calling agents over
A2A (agent_card, a2a_client, agent_http); registering, refreshing and following agents
(agents, sync, following); answering from Slack's buttons (slack), linking Slack members to
accounts (slack_members) and replying to Slack (slack_replies).
"""
