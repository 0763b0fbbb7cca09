"""A push's way in: received and authenticated (receive), kept (ingest; on SQLite in the spool
file beside the database), applied in batches (applier) by the applier process beside each
server (process); refused ones only counted (refusals).
"""
