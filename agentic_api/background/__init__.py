"""Durable background jobs: the queue (enqueue, cancel, failure writes, following a job's
events), the workers that run them, and a running job's event storage."""
