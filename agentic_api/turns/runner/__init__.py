"""What runs a prepared turn, whatever its kind: the turn in progress (``in_progress.py``:
everything written while it runs), the upstream round and its one failure rule
(``round.py``), the relay to our ids and numbers (``relay.py``), the channel to a
streaming client (``channel.py``), token truth (``tokens.py``), and the one place a turn
ends (``finish.py``: the commit, then the terminal event; or the failure stored), with
what to tell the client when the commit's outcome is unknown (``commit_readback.py``)
and a stored response's events rebuilt for replay (``rebuilt_events.py``)."""
