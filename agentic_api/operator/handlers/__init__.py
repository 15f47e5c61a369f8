"""What each operator route asks for: the admin API's views (``admin/``) and the console's
pages (``console/``), each read in one transaction."""
