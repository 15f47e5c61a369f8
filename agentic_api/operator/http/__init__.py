"""The operator plane's routes: the admin API (``admin.py``), the residency views
(``residency.py``) and the console's pages (``console/``)."""
