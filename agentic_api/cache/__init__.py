"""What the engine did with our tokens: each turn's exact token ids (artifacts), the
reuse account of a continuation against its parent's, and the KV-event subscriber with
the per-session residency built from it (``cache/residency``)."""
