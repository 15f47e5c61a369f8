"""The admin inspection API's reads and writes (``/admin/v1``): each function opens its
transaction, asks storage, and returns the wire view the route renders."""
