"""What agents send, read and made safe: A2A 1.0 push bodies (protocol), the Nylorun profile
v2 extensions and tiers (profile, tiers), message parts, and JSON, numbers and text from
outside (json_safety, stored_json, numbers, agent_text). No database.
"""
