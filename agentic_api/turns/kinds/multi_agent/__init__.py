"""The hosted multi-agent beta's turn: a tree of agents, each its own model loop over a
prefix forked from its parent's (docs/multi_agent.md). ``turn.py`` runs a response as
one; ``tree.py`` holds the agents and does the six actions (``actions.py``); ``loop.py``
is one agent's rounds; ``gateway.py`` runs the request's MCP tools for any agent and
``compacting.py`` compacts an agent past ``context_management``'s threshold."""
