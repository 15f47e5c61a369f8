"""The operator plane: what an operator (not a client) uses to look inside the server.

The admin API (``/admin/v1``), the residency views and the operator console
(``/console``), kept in one feature package so the product's request path never carries
them. Only ``agentic_api/app.py`` imports it (an import contract says so). Inside, by
layer, each importing only the ones below it:

- ``http``: the routes: ``http/admin.py`` and ``http/residency.py`` (JSON),
  ``http/console/`` (pages);
- ``handlers``: what each route asks for, one read transaction per view
  (``handlers/admin/`` for the API, ``handlers/console/`` for the pages);
- ``queries``: the operator's own SQL over the product's tables (``storage/models.py``),
  read only, never the turn store's hot path;
- ``shapes``: the pydantic views the admin API emits.
"""
