"""What a session is made of, and the one step every writer takes when one changes (changes):
its progress card (and its renderer, which artifact_markdown uses for artifacts), the fragments
stored for pages, its timeline, search and usage, and what pages read of sessions (activity,
board, listing, question_detail).
"""
