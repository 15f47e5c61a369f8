"""What each operator-console page shows, gathered in one read transaction per page
(``http/console`` renders it). Numbers come from the same queries and presenters as the
admin API (``storage/admin.py``, ``serving/admin/timeline.py``,
``serving/admin/token_account.py``), so a page and the API never disagree; what only the
console shows is in ``storage/console.py``.
"""
