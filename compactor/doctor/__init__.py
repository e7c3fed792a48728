"""`compactor doctor`: check a state dir or a database, say what is wrong and how to fix it,
and repair what can be repaired without losing more than the damage already did."""
