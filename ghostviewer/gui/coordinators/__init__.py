"""One small coordinator per long action (run, replay; later bisect and sweep): each queues jobs through the
job scheduler and finishes its action when the scheduler says its jobs ended."""
