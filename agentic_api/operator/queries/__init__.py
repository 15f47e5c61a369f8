"""The operator plane's own read queries over the product's tables: the admin API's
(``admin.py``) and what only the console shows (``console.py``)."""
