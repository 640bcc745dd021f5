"""The ``notifier`` service: loop-session notifications (seed 001) from the event stream to webhooks."""
