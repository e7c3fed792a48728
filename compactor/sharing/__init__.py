"""One process for every stdio client of a state dir: the relay each `compactor` runs, the host
it connects to or starts, and the hello each says when a connection opens."""
