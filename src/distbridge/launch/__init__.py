"""Starting and supervising worker processes: spawn, Parallel."""
