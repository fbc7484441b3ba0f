"""The send tasks' names: sends.dispatch registers the tasks under them, and what runs
below it (a lane's kill-switch check and its turn) and beside it (batches, cancellation,
the alert rules) looks them up without loading the lane."""

#: A lane of a batch (sends.dispatch.send_batch).
SEND_BATCH_TASK = "scheduler_app.send_batch"
#: One message (sends.dispatch.send_message).
SEND_MESSAGE_TASK = "scheduler_app.send_message"
