"""Everything a turn needs before the model is called (``turn.py:prepare_turn``): the
parent's or conversation's verified history, approvals answered in the input, lineage,
fingerprint, and the exact upstream request (``render.py``, ``summary_request.py``).
Nothing here calls the model."""
