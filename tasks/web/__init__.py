"""Pages for people: the screens (views), an agent's page, the settings and deliveries pages,
password reset with its limits, and what every response gets (middleware, unavailable while
the database is away, one-line logs of client errors).
"""
