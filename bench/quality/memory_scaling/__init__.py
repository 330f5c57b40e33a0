"""Memory-scaling benchmark on synthetic analytics spaces (see __main__ for the command)."""
