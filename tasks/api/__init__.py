"""JSON for scripts and agents: the read API (sessions), cost and usage (usage), and the
progress card API agents write to (cards).
"""
