"""The refresh skeleton every kind runs (:mod:`.skeleton`): pin, plan, the kind's algorithm, the commit."""
