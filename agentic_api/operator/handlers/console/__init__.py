"""What each operator-console page shows, gathered in one read transaction per page
(``operator/http/console`` renders it). Numbers come from the same queries and presenters as the
admin API (``operator/queries/admin.py``, ``operator/handlers/admin/timeline.py``,
``operator/handlers/admin/token_account.py``), so a page and the API never disagree; what only the
console shows is in ``operator/queries/console.py``.
"""
