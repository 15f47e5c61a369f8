"""The domain: one turn = resolve lineage -> rehydrate -> render -> run upstream -> commit."""
