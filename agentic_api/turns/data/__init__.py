"""What a turn is, as values every phase shares and none writes after preparation: the
caller, a reservation, the prepared turn, the hooks its commit runs, the token plan."""
