"""Who may see which row: the access helper, scope narrowing, the view a request reads, and the
row-level-security policy SQL that mirrors them in the database."""
