"""Reaching people outside the tab: team channels (Slack-compatible, signed webhooks, email),
the outbox that feeds them, and the sender that empties it.

    models.py   NotificationChannel (a team's channel) and Notification (the outbox: one row
                per event per channel, written in the transaction of the change it reports)
    outbox.py   the only writer of new outbox rows, called by the applier and answers
    sender.py   the only writer of sending state: claims due rows, sends, retries with backoff
    claims.py   the sender's part that finds what is due, in order, and leases it
    shares.py   each team's share of the sender's workers
    sending.py  one event to one channel (HTTP or SMTP), failures in words for the team and
                for the admin
    targets.py  where a channel may post: public addresses, unless it allows a private one
    formats.py  what each kind of channel receives
    channels.py making channels (the add_channel command, the admin)
    seen.py     what people see of it: "Notified ops: Slack 10:02" per question, a person's
                team channels, and the hint that refreshes pages once something was sent
    admin.py    channels (a webhook's secret shown once) and the read-only outbox
"""
