"""How Onlooker's processes run, under everything else: the database connections of
long-lived threads, SQLite's writers taking turns, statements compiled once, background
loops, noticing that the database is away, and outbound HTTP through a network backend of
our own.
"""
