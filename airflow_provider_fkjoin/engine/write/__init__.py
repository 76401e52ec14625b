"""One refresh's writers: the output MERGE and the net-change commit."""
