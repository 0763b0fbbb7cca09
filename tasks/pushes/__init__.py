"""A push's way in: received and authenticated (receive), kept (deliveries, the one writer of
Delivery rows; on SQLite in the spool file beside the database), applied in batches (applier)
by the applier process beside each server (process), each event by what it carries (apply);
what Onlooker fetched from an agent is kept and applied at once (fetched); refused pushes are
only counted (refusals).
"""
