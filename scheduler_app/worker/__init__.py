"""The runworker claim loop: see loop.Worker."""
