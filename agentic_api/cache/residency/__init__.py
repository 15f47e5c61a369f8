"""KV residency in session coordinates: which replica holds how much of each session's KV
cache, as the replicas' KV events reported it (not a guarantee: what the engine said).

``events`` decodes vLLM's wire format, ``replica`` keeps one replica's map, ``tracker``
holds them all behind one lock with the turns' hooks, ``subscriber`` feeds it from ZMQ in
a thread, ``endpoints`` says which side binds, ``tags`` what each upstream request carries
so its events name our session, and ``attribution`` explains a turn's missing reuse.
"""
