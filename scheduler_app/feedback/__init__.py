"""Mail feedback: one-click unsubscribes, bounces and complaints, and the suppression list.

- ``suppressions``: the list itself (suppress, lift, look up at send time) and feedback events
  (idempotent per source event id, tied back to the recipient and batch, the batch breaker).
- ``unsubscribe``: signed per-recipient links and the List-Unsubscribe headers of batch messages.
- ``views`` / ``urls``: the public one-click endpoint and the signed JSON webhook.
- ``anymail``: django-anymail's tracking signal, connected when anymail is installed.
"""
