"""What the engine did with our tokens, as it reported it: the KV-event subscriber and the
per-session residency built from it (``cache/residency``)."""
